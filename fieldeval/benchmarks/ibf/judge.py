"""The IBF judge, checked: measured against people before it scores a session, and asked more than once.

``--judge-graded FILE`` scores the graded file's responses with ``--judge-model`` and measures its
agreement with the people's grades (:mod:`fieldeval.benchmarks.ibf.agreement`) before any item runs;
``--judge-min-agreement A`` (or ``[tool.fieldeval.judge] min_agreement``) refuses the session when a
dimension's Krippendorff alpha is below A. The measurement is kept with the run.

``--judge-epochs K`` asks the judge K times per response, each repeat under its own cache key; an
item's grade per dimension is the median of its judgements, and the report gives the judge's own
within-item spread and the items whose judgements straddle the pass threshold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fieldeval.errors import UsageError
from scorers.ibf import DIMENSIONS, PASS_THRESHOLD, IbfScore, parse_judgement


def min_agreement_setting(flag_value: float | None) -> float | None:
    """``--judge-min-agreement``, else ``[tool.fieldeval.judge] min_agreement`` of the project, else None."""
    if flag_value is not None:
        return flag_value
    from fieldeval.settings import tool_settings
    from fieldeval.store.location import project_root

    table = tool_settings(project_root()).get("judge", {})
    value = table.get("min_agreement") if isinstance(table, Mapping) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"[tool.fieldeval.judge] min_agreement = {value!r}: not a number; write an alpha "
                         "between -1 and 1, e.g. 0.67")
    return float(value)


def check_options(judge_model: str | None, graded: str | None, min_agreement: float | None, epochs: int) -> None:
    """The judge options together: one line naming the option, the value and the fix."""
    if epochs < 1:
        raise UsageError(f"--judge-epochs {epochs}: must be at least 1")
    if epochs > 1 and not judge_model:
        raise UsageError(f"--judge-epochs {epochs}: needs --judge-model (the reference scorer is deterministic)")
    if graded and not judge_model:
        raise UsageError(f"--judge-graded {graded}: needs --judge-model, the judge to measure against people")
    if min_agreement is not None and not -1.0 <= min_agreement <= 1.0:
        raise UsageError(f"--judge-min-agreement {min_agreement:g}: Krippendorff's alpha lies between -1 and 1; "
                         "pass e.g. 0.67")
    if min_agreement is not None and judge_model and not graded:
        raise UsageError(f"--judge-min-agreement {min_agreement:g}: needs --judge-graded FILE, people's grades to "
                         "measure the judge against (see `fieldeval agreement --help`)")


def measure(judge_model: str, graded: str, corpus, *, min_agreement: float | None) -> dict[str, Any]:
    """The judge's agreement with the graded file, refused (a usage error) below ``min_agreement``.

    Returns:
        ``{"file", "sha256", "judge", "n_responses", "n_items", "min_agreement", "dimensions": {dimension:
        {"alpha": {"value", "ci95"}, "kappa": {"value", "ci95"}, "mae": {"value", "ci95"}}}}``.
    """
    from fieldeval.benchmarks.ibf.agreement import GradedPair, agreement
    from fieldeval.benchmarks.ibf.agreement_cli import read_graded, score_responses

    items = {item.id: item for item in corpus.items}
    lines = read_graded(graded, set(items))
    scored = score_responses(lines, items, judge_model)
    pairs = [GradedPair(item_id, response, grades, scored[(item_id, response)])
             for item_id, response, grades in lines]
    found = agreement(pairs, scorer=f"judge:{judge_model}")
    dimensions = {name: {stat: dim[stat] for stat in ("alpha", "kappa", "mae")}
                  for name, dim in found["dimensions"].items()}
    if min_agreement is not None:
        for name, dim in dimensions.items():
            alpha = dim["alpha"]["value"]
            if alpha is None:
                raise UsageError(f"--judge-graded {graded}: {name}'s alpha is not defined (its grades do not "
                                 "vary); grade responses of differing quality, or lower --judge-min-agreement")
            if alpha < min_agreement:
                raise UsageError(f"--judge-model {judge_model}: {name} agrees with people at alpha {alpha:.2f}, "
                                 f"below --judge-min-agreement {min_agreement:g} ({found['n_responses']} graded "
                                 "responses); improve the judge or its prompt, or choose another judge")
    return {"file": str(graded), "sha256": hashlib.sha256(Path(graded).read_bytes()).hexdigest(),
            "judge": judge_model, "n_responses": found["n_responses"], "n_items": found["n_items"],
            "min_agreement": min_agreement, "dimensions": dimensions}


def ask(client, judge_model: str, prompt: str, *, system: str, schema: dict, epochs: int) -> list:
    """The judge's ``epochs`` completions of one prompt: the first the plain call (so a one-judgement run's
    cache serves it), each other under its own cache key; asked together (``--batch`` sends them in one round)."""
    from fieldeval.run.matrix import Combination

    return client.complete_many([
        {"model_id": judge_model if k == 1 else Combination(judge_model, {}, epoch=k), "prompt": prompt,
         "system": system, "temperature": 0.0, "schema": schema} for k in range(1, epochs + 1)])


def median_score(texts: Sequence[str], scorer: str) -> tuple[IbfScore, list[list[int | None]]]:
    """The item's score from K judgements: per dimension the median of those that graded it (None: none did),
    and each judgement's five grades."""
    import statistics

    judged = [parse_judgement(text, scorer=scorer) for text in texts]
    repeats = [list(score.values) for score in judged]
    if len(judged) == 1:
        return judged[0], repeats
    values = []
    for d in range(len(DIMENSIONS)):
        graded = [r[d] for r in repeats if r[d] is not None]
        values.append(statistics.median(graded) if graded else None)
    reasons = sorted({s.unscored_reason for s in judged if s.unscored_reason})
    reason = None if all(v is not None for v in values) else ("; ".join(reasons) or "no judgement graded it")
    return IbfScore(*values, scorer=scorer, unscored_reason=reason), repeats


def spread(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The judge's own spread over the rows' repeats (``judge_repeats``): per dimension the mean within-item
    standard deviation, and the items whose judgements straddle the pass threshold; None without repeats."""
    import numpy as np

    repeated = [r for r in rows if len(r.get("judge_repeats") or ()) > 1]
    if not repeated:
        return None
    per_dimension: dict[str, float | None] = {}
    straddles: list[str] = []
    for d, name in enumerate(DIMENSIONS):
        sds = []
        for row in repeated:
            graded = [k[d] for k in row["judge_repeats"] if k[d] is not None]
            if len(graded) > 1:
                sds.append(float(np.std(graded)))
        per_dimension[name] = round(float(np.mean(sds)), 6) if sds else None
    for row in repeated:
        for d in range(len(DIMENSIONS)):
            graded = [k[d] for k in row["judge_repeats"] if k[d] is not None]
            if graded and min(graded) < PASS_THRESHOLD <= max(graded):
                straddles.append(str(row.get("item_id")))
                break
    return {"epochs": max(len(r["judge_repeats"]) for r in repeated), "within_item_sd": per_dimension,
            "straddles": sorted(set(straddles))}


__all__ = ["ask", "check_options", "measure", "median_score", "min_agreement_setting", "spread"]
