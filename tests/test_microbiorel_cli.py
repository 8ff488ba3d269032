"""``fieldeval score re`` as a user runs it: agreement with scikit-learn and one-line errors."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys

import pytest
from sklearn.metrics import f1_score, precision_score, recall_score

from scorers.microbiorel import RELATION_CLASSES, normalize_relation

JSON_KEYS = {"weighted_f1", "weighted_precision", "weighted_recall", "macro_f1", "accuracy", "parse_rate", "n",
             "per_class", "ci95"}


def fieldeval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], capture_output=True, text=True)


def write_tsv(path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)


def messy(label: str, rng: random.Random) -> str:
    """A response a model might give for ``label``: clean, decorated, or not a class at all."""
    return rng.choice([label, f"Answer: {label}.", f'"{label.upper()}"', f"I think {label}", "unsure"])


def test_score_re_json_agrees_with_sklearn(tmp_path):
    rng = random.Random(7)
    golds = [rng.choice(RELATION_CLASSES) for _ in range(200)]
    responses = [messy(rng.choice([g, g, rng.choice(RELATION_CLASSES)]), rng) for g in golds]
    write_tsv(tmp_path / "p.tsv", [{"gold": g, "response_text": r} for g, r in zip(golds, responses)])
    result = fieldeval("score", "re", str(tmp_path / "p.tsv"), "--json")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert set(scores) == JSON_KEYS
    labels = [normalize_relation(r) or "__invalid__" for r in responses]
    assert scores["weighted_f1"] == pytest.approx(f1_score(golds, labels, average="weighted", zero_division=0))
    assert scores["weighted_precision"] == pytest.approx(precision_score(golds, labels, average="weighted",
                                                                         zero_division=0))
    assert scores["weighted_recall"] == pytest.approx(recall_score(golds, labels, average="weighted", zero_division=0))
    assert scores["macro_f1"] == pytest.approx(f1_score(golds, labels, labels=sorted(set(golds)), average="macro",
                                                        zero_division=0))
    assert scores["parse_rate"] == pytest.approx(sum(label != "__invalid__" for label in labels) / 200)
    assert scores["n"] == 200 and set(scores["per_class"]) == set(RELATION_CLASSES)


def test_score_re_reads_the_label_none_as_a_string(tmp_path):
    # pandas reads "None" as missing by default; the class must survive
    write_tsv(tmp_path / "p.tsv", [{"gold": "None", "response_text": "None"}, {"gold": "causes", "response_text": "causes"}])
    scores = json.loads(fieldeval("score", "re", str(tmp_path / "p.tsv"), "--json").stdout)
    assert scores["weighted_f1"] == 1.0 and scores["per_class"]["None"]["support"] == 1


def test_score_re_prints_a_table(tmp_path):
    write_tsv(tmp_path / "p.tsv", [{"gold": "None", "response_text": "Answer: none"}])
    result = fieldeval("score", "re", str(tmp_path / "p.tsv"))
    assert result.returncode == 0
    assert "weighted_f1" in result.stdout and "1.0000" in result.stdout


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_score_re_needs_model_when_several_are_present(tmp_path):
    write_tsv(tmp_path / "p.tsv", [{"model": "a", "gold": "None", "response_text": "None"},
                                   {"model": "b", "gold": "None", "response_text": "causes"}])
    result = fieldeval("score", "re", str(tmp_path / "p.tsv"), "--json")
    assert result.returncode == 2
    assert "holds 2 models (a, b); pass --model NAME" in result.stderr
    scores = json.loads(fieldeval("score", "re", str(tmp_path / "p.tsv"), "--json", "--model", "b").stdout)
    assert (scores["n"], scores["accuracy"]) == (1, 0.0)


@pytest.mark.parametrize(("content", "message"), [
    ("gold\tanswer\nNone\tNone\n", "missing column(s) response_text; it needs gold and response_text"),
    ("", "the file is empty"),
    ("gold\tresponse_text\n", "no prediction rows"),
    ("gold\tresponse_text\nBogus\tNone\n", "gold value(s) ['Bogus'] are not MicrobioRel classes"),
], ids=["missing_column", "empty_file", "header_only", "unknown_gold"])
def test_score_re_bad_input_is_one_line_exit_2(tmp_path, content, message):
    path = tmp_path / "p.tsv"
    path.write_text(content)
    result = fieldeval("score", "re", str(path))
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_score_re_missing_file_is_one_line_exit_2(tmp_path):
    result = fieldeval("score", "re", str(tmp_path / "nope.tsv"))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"fieldeval: PREDICTIONS_TSV {tmp_path / 'nope.tsv'}: no such file; "
                                     "pass a TSV with columns gold and response_text")
