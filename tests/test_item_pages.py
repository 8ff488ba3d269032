"""The dashboard's item pages: a run's items filtered and paged on the server, one item with its text escaped."""

from __future__ import annotations

import re

import pytest

from tests.test_diff import EBS_TABLE, IBF_TABLE, RE_TABLE, save_two_runs

BEARER = {"Authorization": "Bearer tok"}


@pytest.fixture
def client(tmp_path):
    from fastapi.testclient import TestClient

    from fieldeval.service.app import create_app
    from tests.service_helpers import ROOT

    url = f"sqlite:///{tmp_path / 'store.db'}"
    save_two_runs(url)
    app = create_app(url, evals_dir=ROOT / "evals", token="tok", work_dir=tmp_path)
    with TestClient(app, base_url="http://127.0.0.1", headers=BEARER) as test_client:
        yield test_client


def _cases(html: str) -> list[str]:
    return re.findall(r'<tr data-case="([^"]+)"', html)


def test_the_items_page_filters_by_class_and_pages_on_the_server(client):
    page = client.get("/runs/run_0000000a", params={"benchmark": "microbiorel", "gold": "Location_of"})
    assert page.status_code == 200
    assert sorted(_cases(page.text)) == sorted(case for case, gold, _, _ in RE_TABLE if gold == "Location_of")
    first = client.get("/runs/run_0000000a", params={"benchmark": "ebs"})
    assert len(_cases(first.text)) == 40  # under a page
    wrong = client.get("/runs/run_0000000a", params={"benchmark": "ebs", "page": "0"})
    assert wrong.status_code == 400 and "page" in wrong.text


def test_the_items_page_filters_by_a_metric_range_and_sorts(client):
    page = client.get("/runs/run_0000000a", params={"benchmark": "ibf", "metric": "impact_reasoning", "min": "2",
                                                    "max": "3", "sort": "-impact_reasoning"})
    expected = [(case, a[1]) for case, a, _ in IBF_TABLE if 2 <= a[1] <= 3]
    shown = _cases(page.text)
    assert sorted(shown) == sorted(case for case, _ in expected)
    values = dict(expected)
    assert [values[c] for c in shown] == sorted(values.values(), reverse=True)


def test_the_items_page_filters_by_relationship(client):
    page = client.get("/runs/run_0000000a", params={"benchmark": "ebs", "relationship": "ancestor"})
    assert sorted(_cases(page.text)) == sorted(case for case, a, _ in EBS_TABLE if a == "ancestor")


def test_the_item_page_shows_the_response_as_text(client):
    page = client.get("/runs/run_0000000a/ebs/case003")
    assert page.status_code == 200
    assert "answer &lt;case003&gt; [/]" in page.text and "<case003>" not in page.text


def test_an_item_of_several_models_asks_for_one_and_an_unknown_item_is_404(client):
    several = client.get("/runs/run_0000000b/ebs/case003")
    assert several.status_code == 400 and "model" in several.text
    assert client.get("/runs/run_0000000b/ebs/case003", params={"model": "other"}).status_code == 200
    assert client.get("/runs/run_0000000b/ebs/nope").status_code == 404
    assert client.get("/runs/run_ffffffff").status_code == 404


def test_every_stored_run_row_links_to_its_items(client):
    page = client.get("/").text
    assert set(re.findall(r'<a class="run-items" href="/runs/([^"]+)"', page)) == {"run_0000000a", "run_0000000b"}


@pytest.fixture
def prompted(tmp_path):
    from fastapi.testclient import TestClient

    from fieldeval.service.app import create_app
    from tests.service_helpers import ROOT
    from tests.test_api_responses import save_prompted_run

    url = f"sqlite:///{tmp_path / 'store.db'}"
    save_two_runs(url)
    save_prompted_run(url)
    app = create_app(url, evals_dir=ROOT / "evals", token="tok", work_dir=tmp_path)
    with TestClient(app, base_url="http://127.0.0.1", headers=BEARER) as test_client:
        yield test_client


def _inner(html: str, element_id: str) -> str:
    """The inner HTML of the element with this id (one not nested in another of its tag)."""
    return re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', html, re.S).group(2)


def test_the_item_page_shows_the_stored_system_text_and_prompt_escaped(prompted):
    from html import unescape

    from tests.test_api_responses import PROMPT, PROMPTED, SYSTEM

    page = prompted.get(f"/runs/{PROMPTED}/ibf/ibf_0001")
    assert page.status_code == 200
    prompt, system = _inner(page.text, "item-prompt"), _inner(page.text, "item-system")
    assert unescape(prompt) == PROMPT and unescape(system) == SYSTEM  # exactly as sent, tab and newline kept
    assert "<" not in prompt + system and "window.__xss" in prompt  # the markup is text


def test_the_item_page_shows_earlier_calls_and_the_calls_figures(prompted):
    from urllib.parse import quote

    from tests.test_api_responses import ODD_CASE, PROMPTED

    page = prompted.get(f"/runs/{PROMPTED}/ibf/{quote(ODD_CASE, safe='')}")
    assert page.status_code == 200
    earlier = _inner(page.text, "item-earlier-calls")
    assert "Summarise &lt;p&gt;this&lt;/p&gt;" in earlier and "a summary &lt;i&gt;of it&lt;/i&gt;" in earlier
    call = _inner(page.text, "item-call")
    assert 'data-label="latency (s)" class="num">0.01<' in call and 'data-label="cached" class="num">False<' in call
    assert "hazard_recognition 4, impact_reasoning 3" in _inner(page.text, "item-explanation")


def test_the_item_page_of_an_errored_item_shows_its_error(prompted):
    from tests.test_api_responses import PROMPTED

    page = prompted.get(f"/runs/{PROMPTED}/ibf/ibf_0099")
    assert page.status_code == 200
    assert "RateLimitError: 429 &lt;too many requests&gt;" in _inner(page.text, "item-error")
    assert "the item errored" in _inner(page.text, "item-scores")
    assert 'data-label="prompt tokens" class="num">-<' in _inner(page.text, "item-call")


def test_the_item_page_of_a_run_stored_without_prompts_says_so(prompted):
    page = prompted.get("/runs/run_0000000a/ibf/ibf_0001")
    assert "not stored with this run" in _inner(page.text, "item-prompt")
    assert "not stored with this run" in _inner(page.text, "item-system")


def test_the_main_page_shows_each_benchmarks_audit_findings_beside_its_charts(prompted):
    page = prompted.get("/").text
    section = page[page.index('<section id="ibf"'):page.index("</section>", page.index('<section id="ibf"'))]
    audit = section[section.index('id="ibf-audit"'):section.index("</aside>")]
    assert section.index('id="ibf-audit"') < section.index('id="ibf-headline"')
    findings = re.findall(r'<li class="audit-finding" data-kind="([^"]+)"><code>[^<]+</code> \((\d+)\): ([^<]*)</li>',
                          audit)
    assert findings == [("hazard_with_few_items", "3", "2 of 3 hazards have fewer than 5 items &lt;dzud&gt;"),
                        ("duplicate_question", "2", "2 items ask 1 question twice")]
    assert "<code>fieldeval audit ibf</code>" in audit
    ebs = page[page.index('id="ebs-audit"'):]
    assert "no findings" in ebs[:ebs.index("</aside>")]
    microbiorel = page[page.index('id="microbiorel-audit"'):]
    assert "no audit stored with these runs" in microbiorel[:microbiorel.index("</aside>")]


def test_runs_that_recorded_different_audit_findings_are_shown_apart():
    from fieldeval.service.dashboard import audit_groups

    one = [{"kind": "duplicate_question", "message": "2 items ask 1 question twice", "count": 2, "cases": ["a"]}]
    records = [{"run_id": "run_1", "payload": {"audit": {"ibf": one}}},
               {"run_id": "run_2", "payload": {"audit": {"ibf": []}}},
               {"run_id": "run_3", "payload": {"audit": {"ibf": [{**one[0], "cases": ["b"]}]}}},
               {"run_id": "run_4", "payload": {}}]  # stored before runs kept an audit: left out
    assert audit_groups(records) == {"ibf": [{"findings": [{k: one[0][k] for k in ("kind", "message", "count")}],
                                              "runs": ["run_1", "run_3"]},
                                             {"findings": [], "runs": ["run_2"]}]}


def test_the_items_page_of_a_run_with_an_errored_item_lists_it(prompted):
    # it answered 500: the template formatted the errored item's missing score
    from tests.test_api_responses import PROMPTED

    page = prompted.get(f"/runs/{PROMPTED}", params={"benchmark": "ibf"})
    assert page.status_code == 200, page.text[:300]
    assert "ibf_0099" in _cases(page.text)


@pytest.mark.parametrize("path", ["/", "/runs/run_0000000a", "/runs/run_0000000a/ebs/case003", "/api/evaluations",
                                  "/runs/run_nothere"])
def test_no_page_of_the_service_can_be_framed_by_another_site(client, path):
    # any page could frame the dashboard (its "start an evaluation" form included)
    answer = client.get(path)
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]


def test_the_dashboard_diffs_the_run_asked_for_not_the_newest(prompted):
    # a loop over the runs list overwrote the `run` parameter: the diff was always against the newest other run
    page = prompted.get("/", params={"base": "run_0000000a", "run": "run_0000000b"})
    assert page.status_code == 200
    summary = re.search(r'<span id="diff-summary">(.*?)</span>', page.text).group(1)
    assert summary.startswith("items of run_0000000b against run_0000000a")
