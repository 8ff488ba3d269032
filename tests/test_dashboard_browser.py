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
SCREENSHOT = ROOT / "reports" / "dashboard.png"


def _run_ibf(store: Path, run_id: str, label: str, *, corpus: Path | None = None, version: str = "ibf-v1.0") -> None:
    """One stored IBF run of the offline floor model, through the engine as the service starts it."""
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "evals" / "test_ibf.py"), "--model", "ibf-floor",
           "--run-id", run_id, "--store", str(store), "--run-label", label, "--corpus-version", version,
           "-p", "no:cacheprovider", "-q", "--reports-dir", str(store.parent / run_id),
           "--eval-report", str(store.parent / run_id / "report.json")]
    if corpus is not None:
        cmd += ["--ibf-corpus", str(corpus)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two IBF runs on two corpus versions; one label is a script tag."""
    folder = tmp_path_factory.mktemp("dashboard")
    old = folder / "ibf-v0.9.jsonl"  # the first 20 items, re-tagged as an older corpus version
    lines = (ROOT / "fixtures" / "ibf" / "ibf-v1.0.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    old.write_text("\n".join(json.dumps({**json.loads(line), "corpus_version": "ibf-v0.9"}) for line in lines) + "\n")
    path = folder / "store.db"
    _run_ibf(path, "run_0000aaaa", "legacy corpus", corpus=old, version="ibf-v0.9")
    _run_ibf(path, "run_0000bbbb", XSS_LABEL)
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

    browser.get(server.base + "/")
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
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))

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
    browser.get(server.base + "/")
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
