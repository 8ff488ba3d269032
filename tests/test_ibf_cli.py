"""``fieldeval score ibf``: the seed's per-run payload from a scores table; bad cells exit 2 in one line."""

from __future__ import annotations

import json

from fieldeval.cli import main
from scorers.ibf import DIMENSIONS


def _phi_3_rows() -> list[list[int]]:
    """100 items whose means and pass rate are the seed's phi-3-mini-4k run (3.12, 2.47, 1.83, 2.91, 2.68; 0.54)."""
    rows = []
    for i in range(100):
        uncertainty = 1 if i < 46 else 3 if i < 75 else 2
        rows.append([4 if i < 12 else 3, 3 if i < 47 else 2, uncertainty, 3 if i < 91 else 2, 3 if i < 68 else 2])
    return rows


def _write(tmp_path, rows, header=("item_id", *DIMENSIONS)):
    path = tmp_path / "scores.tsv"
    lines = ["\t".join(header)] + ["\t".join([f"ci_{n:04d}", *("" if v is None else str(v) for v in row)])
                                   for n, row in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_score_ibf_reproduces_the_seed_run_payload(tmp_path, capsys):
    assert main(["score", "ibf", str(_write(tmp_path, _phi_3_rows())), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["scores"] == {"hazard_recognition": 3.12, "impact_reasoning": 2.47, "uncertainty_handling": 1.83,
                                 "action_relevance": 2.91, "geographic_specificity": 2.68}
    assert (payload["mean_dimension_score"], payload["threshold_pass_rate"], payload["total_items"]) == (2.60, 0.54, 100)
    assert payload["reading"]["overall"] == "partial"


def test_blank_cells_are_unscored_not_zero(tmp_path, capsys):
    assert main(["score", "ibf", str(_write(tmp_path, [[4, 3, 3, 4, 3], [None, None, None, None, None]])), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["mean_dimension_score"] == 3.4 and payload["threshold_pass_rate"] == 1.0
    assert payload["total_items"] == 2 and payload["unscored"]["impact_reasoning"] == 1


def test_text_output_names_the_band(tmp_path, capsys):
    assert main(["score", "ibf", str(_write(tmp_path, _phi_3_rows()))]) == 0
    out = capsys.readouterr().out
    assert "mean_dimension_score     2.60  (ci95 2.57-2.64)  partial" in out


def test_out_of_range_value_exits_2_naming_row_and_column(tmp_path, capsys):
    rows = [[4, 3, 3, 4, 3], [4, 5, 3, 4, 3]]
    assert main(["score", "ibf", str(_write(tmp_path, rows))]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "row 3 (item_id ci_0001) column impact_reasoning: '5' is not an integer 0-4" in err


def test_non_integer_value_exits_2(tmp_path, capsys):
    path = _write(tmp_path, [["3.5", 3, 3, 4, 3]])
    assert main(["score", "ibf", str(path)]) == 2
    assert "column hazard_recognition: '3.5'" in capsys.readouterr().err


def test_missing_column_exits_2(tmp_path, capsys):
    path = _write(tmp_path, [[4, 3, 3, 4]], header=("item_id", *DIMENSIONS[:4]))
    assert main(["score", "ibf", str(path)]) == 2
    assert "missing column(s) geographic_specificity" in capsys.readouterr().err


def test_several_models_give_the_compare_shape(tmp_path, capsys):
    path = tmp_path / "scores.tsv"
    path.write_text("model\titem_id\t" + "\t".join(DIMENSIONS) + "\n"
                    "a\t1\t4\t3\t3\t4\t3\nb\t1\t1\t1\t1\t1\t1\n", encoding="utf-8")
    assert main(["score", "ibf", str(path), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["model_name"], r["mean_dimension_score"]) for r in runs] == [("a", 3.4), ("b", 1.0)]
