"""The data registry: pinned files, hash checks, and one clear line when a file cannot be had."""

from __future__ import annotations

import pytest

from fieldeval import data
from fieldeval.errors import UsageError


def test_reads_from_data_dir_and_verifies(data_dir, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(data_dir))
    path = data.fetch("nmdc-ai-eval/ebs-suite.yaml")
    assert path == data_dir / "nmdc-ai-eval" / "ebs-suite.yaml"


def test_missing_file_in_data_dir_names_file_url_and_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(UsageError) as error:
        data.fetch("envo/envo.obo")
    message = str(error.value)
    assert "envo/envo.obo" in message and data.REGISTRY["envo/envo.obo"].url in message
    assert data.DATA_DIR_ENV in message and "\n" not in message


def test_corrupt_file_fails_its_hash_check(tmp_path, monkeypatch):
    (tmp_path / "envo").mkdir()
    (tmp_path / "envo" / "envo.obo").write_text("format-version: 1.2\n")
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(UsageError, match="sha256"):
        data.fetch("envo/envo.obo")


def test_offline_download_names_file_url_and_variable(tmp_path, monkeypatch):
    import pooch

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(pooch, "retrieve", offline)
    with pytest.raises(UsageError) as error:
        data.fetch("microbiorel/masked/test.csv")
    message = str(error.value)
    assert data.REGISTRY["microbiorel/masked/test.csv"].url in message and data.DATA_DIR_ENV in message


def test_download_goes_to_the_cache_with_its_pinned_hash(tmp_path, monkeypatch):
    import pooch

    calls = []

    def fake_retrieve(url, known_hash, fname, path, progressbar):
        calls.append((url, known_hash))
        (path / fname).parent.mkdir(parents=True, exist_ok=True)
        (path / fname).write_text("x")
        return str(path / fname)

    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(pooch, "retrieve", fake_retrieve)
    entry = data.REGISTRY["nmdc-ai-eval/ebs-suite.yaml"]
    path = data.fetch(entry.path)
    assert calls == [(entry.url, f"sha256:{entry.sha256}")]
    assert path == tmp_path / "data" / entry.path


def test_unknown_file_lists_the_known_ones():
    with pytest.raises(UsageError, match="envo/envo.obo"):
        data.fetch("nope.csv")


def test_registry_matches_the_mirror_readme(data_dir):
    readme = (data_dir / "README.md").read_text()
    for entry in data.REGISTRY.values():
        assert f"| {entry.path} | {entry.url} | {entry.sha256} |" in readme
