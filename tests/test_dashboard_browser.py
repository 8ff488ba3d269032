"""The dashboard in headless Chromium (Debian's chromium and chromium-driver): charts, sorting, filters, escaping.

The browser is required: where it cannot be found the tests fail, they never skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service_helpers import ROOT, Server

XSS_LABEL = "<script>window.__xss = 1</script> label"
SCREENSHOTS = {w: ROOT / "reports" / f"dashboard-{w}.png" for w in (1400, 420)}  # copies are committed in docs/
CHECK_PAGE = (Path(__file__).parent / "dashboard_check.js").read_text(encoding="utf-8")

pytestmark = pytest.mark.slow  # runs the engine eight times and drives a browser: once in CI (`-m slow`)


def _run(store: Path, run_id: str | None, label: str, *args: str) -> None:
    """One stored run of an offline baseline, through the engine as the service starts it."""
    folder = store.parent / (run_id or label.replace(" ", "-"))
    cmd = [sys.executable, "-m", "pytest", *args, "--store", str(store), "--run-label", label,
           "-p", "no:cacheprovider", "-q", "--reports-dir", str(folder), "--eval-report", str(folder / "report.json")]
    if run_id:
        cmd += ["--run-id", run_id]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]


def _run_ibf(store: Path, run_id: str, label: str, *, corpus: Path | None = None, version: str = "ibf-v1.0") -> None:
    args = [str(ROOT / "evals" / "test_ibf.py"), "--model", "ibf-floor", "--corpus-version", version]
    _run(store, run_id, label, *args, *(["--ibf-corpus", str(corpus)] if corpus is not None else []))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """IBF runs on two corpus versions (one label is a script tag), EBS runs (one errored on every item, one
    sharded and merged) and a MicrobioRel run."""
    folder = tmp_path_factory.mktemp("dashboard")
    old = folder / "ibf-v0.9.jsonl"  # the first 20 items, re-tagged as an older corpus version
    lines = (ROOT / "fixtures" / "ibf" / "ibf-v1.0.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    old.write_text("\n".join(json.dumps({**json.loads(line), "corpus_version": "ibf-v0.9"}) for line in lines) + "\n")
    path = folder / "store.db"
    _run_ibf(path, "run_0000aaaa", "legacy corpus", corpus=old, version="ibf-v0.9")
    _run_ibf(path, "run_0000bbbb", XSS_LABEL)
    ebs = str(ROOT / "evals" / "test_ebs.py")
    _run(path, "run_0000eeee", "ebs first cases", ebs, "-k", "case00 or case01 or case02")
    _run(path, "run_0000dead", "replay of an empty cache", ebs, "-k", "case00", "--cache", "replay",
         "--cache-path", str(folder / "empty.sqlite"))
    for group in (1, 2):
        _run(path, None, f"shard {group}", ebs, "-k", "case03 or case04", "--splits", "2", "--group", str(group),
             "--run-group", "g1")
    merged = subprocess.run([sys.executable, "-m", "fieldeval.cli", "runs", "merge", "g1", "--store", str(path),
                             "--allow-partial"],  # the shards ran a -k selection of the suite
                            cwd=folder, capture_output=True, text=True, timeout=300)
    assert merged.returncode in (0, 1), merged.stderr
    _run(path, "run_0000ae1a", "re baseline", str(ROOT / "evals" / "test_microbiorel.py"), "-k", "pair00 or pair01")
    return path


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.fail("headless Chromium not found: install Debian's chromium and chromium-driver "
                    "(apt-get install chromium chromium-driver); .ci/run does this")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1500,1150"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(store: Path):
    running = Server(store).start()
    yield running
    running.stop()


def _dashboard(server: Server) -> str:
    """The URL ``fieldeval serve`` prints: the dashboard with its token, which the page keeps as a cookie."""
    return f"{server.base}/?token={server.token}"


def _wait(driver, script: str, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def _visible_ibf_rows(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#ibf-table tbody tr'))"
        ".filter(r => !r.classList.contains('hidden')).map(r => r.dataset.run)")


def _mds_column(driver) -> list[float]:
    return driver.execute_script(
        "const i = Array.from(document.querySelectorAll('#ibf-table thead th'))"
        ".findIndex(th => th.dataset.metric === 'mean_dimension_score');"
        "return Array.from(document.querySelectorAll('#ibf-table tbody tr'))"
        ".map(r => parseFloat(r.children[i].dataset.value))")


def test_dashboard_renders_radar_and_table_sorts_filters_and_escapes(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(_dashboard(server))
    assert _wait(browser, "return document.querySelector('#ibf-radar .main-svg') !== null")
    assert browser.execute_script("return document.getElementById('ibf-radar').data.length") == 2
    assert browser.execute_script("return document.querySelectorAll('#ibf-radar .scatterlayer .trace').length") >= 2
    assert sorted(_visible_ibf_rows(browser)) == ["run_0000aaaa", "run_0000bbbb"]

    mds_header = browser.find_element(By.CSS_SELECTOR, "#ibf-table th[data-metric='mean_dimension_score']")
    mds_header.click()
    assert mds_header.get_attribute("aria-sort") == "descending"
    assert _mds_column(browser) == sorted(_mds_column(browser), reverse=True)
    mds_header.click()
    assert _mds_column(browser) == sorted(_mds_column(browser))

    labels = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#ibf-table td.label")]
    assert XSS_LABEL in labels  # shown as text, not run as a script
    assert browser.execute_script("return window.__xss") is None
    assert browser.execute_script("return document.querySelectorAll('td.label script').length") == 0
    Select(browser.find_element(By.ID, "filter-corpus")).select_by_value("ibf-v0.9")
    assert _wait(browser, "return document.getElementById('ibf-radar').data.length === 1")
    assert _visible_ibf_rows(browser) == ["run_0000aaaa"]
    runs = browser.execute_script("return Array.from(document.querySelectorAll('#runs-table tbody tr'))"
                                  ".filter(r => !r.classList.contains('hidden')).map(r => r.dataset.run)")
    assert runs == ["run_0000aaaa"]


def test_live_status_of_a_running_run_is_shown(browser, server):
    status, started = server.call("POST", "/api/evaluations", {"model_id": "ibf-floor", "corpus_version": "ibf-v1.0",
                                                               "label": "live"})
    assert status == 202
    browser.get(_dashboard(server))
    row = f"#runs-table tr[data-run='{started['run_id']}'] .status"
    assert _wait(browser, f"const c = document.querySelector(\"{row}\"); return c && c.textContent.trim()")
    assert _wait(browser, f"return document.querySelector(\"{row}\").textContent === 'completed'", timeout=90)


def test_report_file_is_self_contained_and_renders(browser, store, tmp_path):
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "fieldeval.cli", "report", "run_0000aaaa", "run_0000bbbb",
                           "-o", str(out), "--store", str(store)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    html = out.read_text(encoding="utf-8")
    assert 'src="http' not in html and "<script src=" not in html
    assert "<script>window.__xss" not in html
    browser.get(out.as_uri())
    assert _wait(browser, "return document.querySelector('#ibf-radar .main-svg') !== null")
    assert browser.execute_script("return document.getElementById('ibf-radar').data.length") == 2


NO_PROBLEMS = {"overflow": [], "cut": [], "untitled": [], "nointerval": []}


def _charts_drawn(driver) -> bool:
    return driver.execute_script(
        "const charts = Array.from(document.querySelectorAll('.chart')).filter(c => c.getClientRects().length);"
        "return charts.length > 0 && charts.every(c => c.querySelector('.main-svg') !== null"
        " && c.querySelector('.main-svg').getBoundingClientRect().width <= c.clientWidth + 1)")


def _open_at(driver, url: str, width: int) -> None:
    """The page at ``width`` px, the window as tall as the page, every chart drawn at that width."""
    driver.set_window_size(width, 1000)
    driver.get(url)
    assert _wait(driver, "return document.readyState === 'complete'")
    assert _wait(driver, "return document.querySelector('#ebs-headline .main-svg') !== null")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(height + 200, 16000))
    from selenium.webdriver.support.ui import WebDriverWait

    assert WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return !document.body.dataset.redrawing") and _charts_drawn(d))


def _traces(driver) -> list[dict]:
    """Every drawn trace: chart id, name, colour, bar values' interval arrays and texts."""
    return driver.execute_script(
        "const out = [];"
        "document.querySelectorAll('.js-plotly-plot').forEach(p => (p.data || []).forEach(t => out.push({"
        " chart: p.id || p.dataset.key, type: t.type, name: t.name,"
        " colour: (t.marker && t.marker.color) || (t.line && t.line.color) || null,"
        " text: t.text || null})));"
        "return out;")


@pytest.mark.parametrize("width", [1400, 420])
def test_every_text_fits_and_every_chart_has_titles_and_intervals_at_desktop_and_phone_width(browser, server, width):
    _open_at(browser, _dashboard(server), width)
    assert browser.execute_script(CHECK_PAGE) == NO_PROBLEMS
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scroll
    cards = browser.execute_script("return getComputedStyle(document.querySelector('#runs-table thead')).display")
    assert (cards == "none") == (width < 600)  # the runs table collapses to cards on a phone
    assert browser.execute_script("return document.querySelectorAll('.modebar-container .modebar').length") == 0
    SCREENSHOTS[width].parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS[width]))


def test_the_page_check_finds_cut_text_and_missing_titles(browser, server):
    # the check above must be able to fail: a clipped cell, and a chart with cut labels and no axis titles
    _open_at(browser, _dashboard(server), 1400)
    browser.execute_script(
        "const td = document.querySelector('#runs-table td.label');"
        "td.style.cssText = 'display:block;max-width:30px;white-space:nowrap;overflow:hidden';"
        "td.textContent = 'a label far too long for its cell';"
        "const probe = document.createElement('div');"
        "probe.id = 'probe'; probe.style.cssText = 'width:300px;height:200px';"
        "document.body.appendChild(probe);"
        "Plotly.newPlot(probe, [{type: 'bar', x: ['a category name far too long for this chart'], y: [1],"
        " error_y: {type: 'data', array: [0.1]}}], {title: {text: 'probe'}, margin: {l: 0, r: 0, t: 30, b: 0},"
        " xaxis: {automargin: false, tickfont: {size: 40}}}, {displayModeBar: false});")
    assert _wait(browser, "return document.querySelector('#probe .main-svg') !== null")
    problems = browser.execute_script(CHECK_PAGE)
    assert problems["overflow"] == ["TD: a label far too long for its cell"]
    assert problems["untitled"] == ["probe: axis title"]
    assert any(cut.startswith("probe: ") for cut in problems["cut"]) and problems["nointerval"] == []


def test_one_colour_per_run_across_every_chart(browser, server):
    _open_at(browser, _dashboard(server), 1400)
    colours: dict[str, set[str]] = {}
    for trace in _traces(browser):
        if trace["type"] in ("bar", "scatterpolar"):
            colours.setdefault(trace["name"], set()).add(trace["colour"])
    assert colours and all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)  # and no colour for two runs


def test_shards_are_hidden_while_their_merged_run_is_shown(browser, server):
    from selenium.webdriver.common.by import By

    _open_at(browser, _dashboard(server), 1400)
    shards = browser.execute_script("return Array.from(document.querySelectorAll('#runs-table tr[data-shard-of]'))"
                                    ".map(r => [r.dataset.run, r.dataset.shardOf])")
    assert len(shards) == 2 and len({merged for _, merged in shards}) == 1
    merged = shards[0][1]
    names = " ".join(t["name"] for t in _traces(browser) if t["chart"] == "ebs-headline")
    assert merged in names and not any(run in names for run, _ in shards)
    browser.find_element(By.CSS_SELECTOR, f"#runs-table tr[data-run='{merged}'] .select-run").click()
    assert _wait(browser, "return Array.from(document.getElementById('ebs-headline').data)"
                          f".filter(t => t.name.includes('{shards[0][0]}')).length === 1")


def test_an_errored_run_is_marked_in_the_table_and_the_charts(browser, server):
    _open_at(browser, _dashboard(server), 1400)
    badge = browser.execute_script("const b = document.querySelector(\"#runs-table tr[data-run='run_0000dead'] .errored-badge\");"
                                   "return b && b.textContent")
    assert badge == "⚠ 10 errored"
    [trace] = [t for t in _traces(browser) if t["chart"] == "ebs-headline" and "run_0000dead" in t["name"]]
    assert set(trace["text"]) == {"errored: no score"}


def test_the_ebs_headline_chart_compares_every_shown_run(browser, server):
    _open_at(browser, _dashboard(server), 1400)
    names = [t["name"] for t in _traces(browser) if t["chart"] == "ebs-headline"]
    assert len(names) == 3 and any("run_0000eeee" in n for n in names)
    x = browser.execute_script("return document.getElementById('ebs-headline').data[0].x")
    assert x == ["ontology score", "exact match", "hierarchy score", "in template enum", "parse success"]


def test_the_form_starts_an_evaluation_with_the_pages_cookie(browser, server):
    from selenium.webdriver.common.by import By

    browser.get(_dashboard(server))
    browser.find_element(By.ID, "evaluate-model").send_keys("ibf-floor")
    browser.find_element(By.ID, "evaluate-label").send_keys("from the form")
    browser.find_element(By.CSS_SELECTOR, "#evaluate button[type='submit']").click()
    status = _wait(browser, "const s = document.getElementById('evaluate-status').textContent; return s && s")
    assert status.startswith("started run_"), status  # a 401 would show the service's message instead
    run_id = status.split()[1]
    server.wait_for(run_id, ("completed",))


@pytest.fixture(scope="module")
def diff_server(tmp_path_factory: pytest.TempPathFactory):
    """A service over two runs whose item outcomes tests/test_diff.py's tables set."""
    from tests.test_diff import save_two_runs

    path = tmp_path_factory.mktemp("diff") / "store.db"
    save_two_runs(f"sqlite:///{path}")
    running = Server(path).start()
    yield running
    running.stop()


def _fits(driver) -> None:
    assert driver.execute_script(CHECK_PAGE)["overflow"] == []
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("width", [1400, 420])
def test_an_item_opens_from_the_runs_table(browser, diff_server, width):
    from selenium.webdriver.common.by import By

    _open_at(browser, _dashboard(diff_server), width)
    browser.find_element(By.CSS_SELECTOR, "#runs-table tr[data-run='run_0000000b'] a.run-items").click()
    assert _wait(browser, "return document.getElementById('items-table') !== null")
    from tests.test_diff import EBS_TABLE

    total = len(EBS_TABLE) - 2 + 1 + len(EBS_TABLE)  # EBS, the first benchmark: m2 lost two cases, gained one
    assert browser.find_element(By.ID, "item-count").text.startswith(f"{total} items")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#items-table tbody tr")) == 50  # a page, from the server
    _fits(browser)
    browser.find_element(By.ID, "next-page").click()
    assert _wait(browser, f"return document.querySelectorAll('#items-table tbody tr').length === {total - 50}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#items-table tbody tr")
    first = rows[0].get_attribute("data-case")
    rows[0].find_element(By.CSS_SELECTOR, "a.item-link").click()
    assert _wait(browser, "return document.getElementById('item-title') !== null")
    assert first in browser.find_element(By.ID, "item-title").text
    assert browser.find_element(By.ID, "item-response").text == f"answer <{first}> [/]"  # text, not markup
    _fits(browser)


@pytest.mark.parametrize("width", [1400, 420])
def test_the_diff_of_a_base_chosen_in_the_control_lists_worse_items_and_flips(browser, diff_server, width):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.test_diff import RE_TABLE

    _open_at(browser, _dashboard(diff_server), width)
    Select(browser.find_element(By.ID, "diff-base")).select_by_value("run_0000000a")
    Select(browser.find_element(By.ID, "diff-run")).select_by_value("run_0000000b")
    browser.find_element(By.CSS_SELECTOR, "#diff-form button[type='submit']").click()
    assert _wait(browser, "return document.getElementById('microbiorel-diff') !== null")
    worse = sorted(case for case, _, a, b in RE_TABLE if a and not b)
    better = sorted(case for case, _, a, b in RE_TABLE if b and not a)
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('#microbiorel-diff .diff-worse tbody tr[data-case]'))"
        ".map(r => r.dataset.case)")
    assert shown == worse[:10]  # all -1.0: worst first, then by case id
    cells = browser.execute_script("return Array.from(document.querySelectorAll('#microbiorel-diff .diff-flips td'))"
                                   ".map(td => td.textContent.trim())")
    assert cells[1:3] == [str(len(worse)), str(len(better))]
    _open_at(browser, browser.current_url, width)
    _fits(browser)
    link = browser.find_element(By.CSS_SELECTOR, "#microbiorel-diff .diff-worse a.base-item")
    link.click()
    assert _wait(browser, "return document.getElementById('item-title') !== null")
    assert "/runs/run_0000000a/microbiorel/" + worse[0] in browser.current_url
    assert browser.find_element(By.ID, "item-response").text == f"answer <{worse[0]}> [/]"
    _fits(browser)


@pytest.fixture(scope="module")
def prompted_server(tmp_path_factory: pytest.TempPathFactory):
    """A service over tests/test_diff.py's two runs and a run stored with prompts and gold-data findings."""
    from tests.test_api_responses import save_prompted_run
    from tests.test_diff import save_two_runs

    path = tmp_path_factory.mktemp("prompted") / "store.db"
    save_two_runs(f"sqlite:///{path}")
    save_prompted_run(f"sqlite:///{path}")
    running = Server(path).start()
    yield running
    running.stop()


@pytest.mark.parametrize("width", [1400, 420])
def test_each_benchmarks_audit_findings_show_beside_its_charts_and_fit(browser, prompted_server, width):
    from tests.test_api_responses import AUDIT

    _open_at(browser, _dashboard(prompted_server), width)
    lines = browser.execute_script("return Array.from(document.querySelectorAll('#ibf-audit li.audit-finding'))"
                                   ".map(li => li.textContent)")
    assert lines == [f"{f['kind']} ({f['count']}): {f['message']}" for f in AUDIT["ibf"]]
    assert "fieldeval audit ibf" in browser.execute_script("return document.querySelector('#ibf-audit').textContent")
    _fits(browser)


@pytest.mark.parametrize("width", [1400, 420])
def test_an_item_page_with_its_prompt_and_earlier_calls_fits(browser, prompted_server, width):
    from urllib.parse import quote

    from tests.test_api_responses import EARLIER, ODD_CASE, PROMPT, PROMPTED

    browser.set_window_size(width, 1000)
    browser.get(f"{prompted_server.base}/?token={prompted_server.token}")  # sets the cookie
    browser.get(f"{prompted_server.base}/runs/{PROMPTED}/ibf/{quote(ODD_CASE, safe='')}")
    assert _wait(browser, "return document.getElementById('item-prompt') !== null")
    assert browser.execute_script("return document.getElementById('item-prompt').textContent") == PROMPT
    assert browser.execute_script("return window.__xss") is None
    earlier = browser.execute_script("return document.querySelector('.earlier-prompt').textContent")
    assert earlier == EARLIER[0]["prompt"]
    _fits(browser)


# --- eight IBF runs: the tables a reader compares them in ------------------------------------------------

@pytest.fixture(scope="module")
def ibf_server(tmp_path_factory: pytest.TempPathFactory):
    """Eight IBF runs of the offline floor, each on a few items (the width of a comparison, not its numbers)."""
    path = tmp_path_factory.mktemp("ibf8") / "store.db"
    for k in range(8):
        _run(path, f"run_0000ib{k:02d}", f"ibf run {k + 1}", str(ROOT / "evals" / "test_ibf.py"), "--model",
             "ibf-floor", "-k", " or ".join(f"ibf_{8 * k + d:04d}" for d in (1, 2, 3)))
    running = Server(path).start()
    yield running
    running.stop()


def _open_ibf_at(driver, server: Server, width: int) -> None:
    driver.set_window_size(width, 1000)
    driver.get(_dashboard(server))
    assert _wait(driver, "return document.querySelector('#ibf-headline .main-svg') !== null")


def test_the_ibf_headline_metrics_show_without_scrolling_at_desktop_width(browser, ibf_server):
    _open_ibf_at(browser, ibf_server, 1400)
    assert len(_visible_ibf_rows(browser)) == 8
    edges = browser.execute_script(
        "const table = document.querySelector('#ibf-table'); const box = table.closest('.scroll');"
        "const right = Math.min(box.getBoundingClientRect().right, window.innerWidth);"
        "return ['mean_dimension_score', 'threshold_pass_rate'].map((m) => {"
        " const th = table.querySelector(`thead th[data-metric=${m}]`);"
        " return [m, th.getBoundingClientRect().right <= right + 1]; })"
        ".concat([['no sideways scroll', box.scrollWidth <= box.clientWidth + 1]]);")
    assert edges == [["mean_dimension_score", True], ["threshold_pass_rate", True], ["no sideways scroll", True]]


def test_the_ibf_dimension_names_read_whole_words_at_phone_width_with_eight_runs(browser, ibf_server):
    _open_ibf_at(browser, ibf_server, 420)
    names = browser.execute_script(
        "return Array.from(document.querySelectorAll('#ibf-intervals tbody th')).map((th) => {"
        " const probe = document.createElement('span'); probe.style.whiteSpace = 'nowrap';"
        " probe.style.font = getComputedStyle(th).font;"
        " probe.textContent = th.textContent.trim().split(/\\s+/).sort((a, b) => b.length - a.length)[0];"
        " document.body.appendChild(probe); const word = probe.getBoundingClientRect().width; probe.remove();"
        " const style = getComputedStyle(th);"
        " const inner = th.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);"
        " return [th.textContent.trim(), inner + 0.5 >= word]; })")
    assert len(names) == 5
    assert all(fits for _, fits in names), names  # no dimension name broken inside a word
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    assert browser.execute_script(CHECK_PAGE)["overflow"] == []
