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
