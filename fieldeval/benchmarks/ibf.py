"""Impact-based forecasting (IBF): the corpus, prompts, aggregation, scored table and ``fieldeval score ibf``."""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fieldeval.errors import UsageError
from fieldeval.stats import mean_metric, statistic_metric
from scorers.ibf import DIMENSIONS, JUDGE_SCHEMA, PASS_THRESHOLD, reading, run_scores

NAME = "ibf"
HEADLINE = [*DIMENSIONS, "mean_dimension_score", "threshold_pass_rate"]
METRICS = HEADLINE
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = PROJECT_ROOT / "fixtures" / "ibf"
DEFAULT_VERSION = "ibf-v1.0"
DEFAULT_TEMPERATURE = 0.0
DEFAULT_MAX_TOKENS = 512
SCORES_FILE = "scores.tsv"
SCORE_COLUMNS = ["item_id", *DIMENSIONS]
TABLE_COLUMNS = ["model", "item_id", "hazard", "region", "corpus_version", *DIMENSIONS, "scorer",
                 "unscored_reason", "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd",
                 "cached", "response_text", "judge_response"]

SYSTEM_PROMPT = (
    "You are an impact-based forecasting adviser to humanitarian and disaster-management teams. "
    "Given a forecast alert, reason about the hazard, its likely impacts on people, agriculture and "
    "infrastructure, the forecast uncertainty, the anticipatory actions to take and the places affected "
    "(country, province or region, district). Answer in at most 250 words."
)

JUDGE_SYSTEM = (
    "You grade answers to impact-based forecasting questions. Score each of five dimensions as an integer "
    "from 0 to 4 and reply with one JSON object only."
)

RUBRIC = """Dimensions:
1 hazard_recognition: does the response correctly identify the meteorological or hydrological hazard type?
2 impact_reasoning: does it link the hazard to plausible societal, agricultural or infrastructure impacts?
3 uncertainty_handling: does it acknowledge forecast uncertainty appropriately rather than overstating confidence?
4 action_relevance: does it suggest anticipatory actions consistent with the hazard context?
5 geographic_specificity: does it ground its reasoning in the stated region, country or administrative level?

Scale (each dimension):
4 Excellent: fully correct, specific and contextually appropriate
3 Good: correct with minor omissions or imprecision
2 Partial: partially correct; key elements missing or confused
1 Poor: mostly incorrect but shows marginal relevant content
0 Absent: no relevant content, refusal, or hallucinated response"""


# --- the corpus -------------------------------------------------------------------------------


Phrase = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Phrases = Annotated[list[Phrase], Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HazardNotes(_Strict):
    """The hazard: its type, synonyms a response may use, and its magnitude indicators."""

    type: str = Field(min_length=1)
    synonyms: list[Phrase] = Field(default_factory=list)
    indicators: Phrases


class ImpactNotes(_Strict):
    """Expected impacts by kind."""

    societal: Phrases
    agricultural: Phrases
    infrastructure: Phrases


class GeographyNotes(_Strict):
    """Where: the country, admin-1 and admin-2 units, and physical features (basins, coasts)."""

    country: str = Field(min_length=1)
    admin1: Phrases
    admin2: Phrases
    features: list[Phrase] = Field(default_factory=list)


class References(_Strict):
    """Reference notes per rubric dimension."""

    hazard: HazardNotes
    impacts: ImpactNotes
    uncertainties: Phrases
    actions: Phrases
    geography: GeographyNotes


class ForecastContext(_Strict):
    """The forecast as issued: alert, location, lead time and magnitude."""

    alert: str = Field(min_length=1)
    location: str = Field(min_length=1)
    lead_time: str = Field(pattern=r"^\d+ (hours?|days?|weeks?|months?)$")
    magnitude: str = Field(min_length=1)


class IbfItem(_Strict):
    """One corpus item, shaped like the seed's ci_0814."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    corpus_version: str = Field(min_length=1)
    hazard: str = Field(min_length=1)
    region: str = Field(min_length=1)
    context: ForecastContext
    question: str = Field(min_length=1)
    references: References

    @property
    def test_id(self) -> str:
        """A readable pytest id: hazard, country and item id."""
        country = self.references.geography.country
        return "-".join("_".join(p.lower().replace("'", "").split()) for p in (self.hazard, country, self.id))


@dataclass(frozen=True)
class IbfCorpus:
    """A loaded corpus: its version tag, items and content hash."""

    version: str
    items: tuple[IbfItem, ...]
    sha256: str
    path: Path


def available_versions() -> list[str]:
    """The corpus versions shipped under fixtures/ibf/."""
    return sorted(p.stem for p in CORPUS_DIR.glob("*.jsonl"))


def load_corpus(path: str | Path | None = None, version: str | None = None) -> IbfCorpus:
    """Load and validate an IBF corpus (JSON lines).

    Args:
        path: a corpus file; None means ``fixtures/ibf/<version>.jsonl``.
        version: the corpus tag; with ``path`` it keeps only the items of that version.

    Returns:
        The corpus.

    Raises:
        UsageError: a missing file, a line that is not JSON, or an item that breaks the schema
            (one line naming the item id and field).

    Example:
        >>> len(load_corpus().items) >= 60
        True
    """
    if path is None:
        version = version or DEFAULT_VERSION
        path = CORPUS_DIR / f"{version}.jsonl"
        if not path.is_file():
            raise UsageError(f"--corpus-version {version}: no such corpus; choose one of "
                             f"{', '.join(available_versions())} or pass --ibf-corpus PATH")
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--ibf-corpus {path}: no such file; pass a JSON-lines IBF corpus")
    raw = path.read_bytes()
    items: list[IbfItem] = []
    seen: set[str] = set()
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path} line {number}: not JSON ({error.msg}); write one JSON object per line") from None
        item_id = data.get("id") if isinstance(data, dict) else None
        try:
            item = IbfItem.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "item"
            raise UsageError(f"{path} item {item_id or f'on line {number}'}: field {field}: {first['msg']}; "
                             "fix the item to match the IBF corpus schema") from None
        if item.id in seen:
            raise UsageError(f"{path} item {item.id}: field id: duplicated; give every item its own id")
        seen.add(item.id)
        items.append(item)
    if version is not None:
        items = [i for i in items if i.corpus_version == version]
    if not items:
        raise UsageError(f"{path}: no items{f' of corpus version {version}' if version else ''}; "
                         "check --corpus-version against the items' corpus_version")
    versions = sorted({i.corpus_version for i in items})
    return IbfCorpus(versions[0] if len(versions) == 1 else "+".join(versions), tuple(items),
                     hashlib.sha256(raw).hexdigest(), path)


# --- prompts ----------------------------------------------------------------------------------


def render_prompt(item: IbfItem) -> str:
    """The prompt a model under test sees: the forecast context and the question, never the references."""
    c = item.context
    return (f"Context: {c.alert}\nLocation: {c.location}\nForecast lead time: {c.lead_time}. {c.magnitude}\n\n"
            f"Question: {item.question}")


def judge_prompt(item: IbfItem, response: str) -> str:
    """The judge's prompt: rubric, item, reference notes and the response to grade."""
    refs = json.dumps(item.references.model_dump(), indent=2, ensure_ascii=False)
    keys = ", ".join(f'"{d}": <0-4>' for d in DIMENSIONS)
    return (f"{RUBRIC}\n\nForecasting task:\n{render_prompt(item)}\n\nReference notes (what a strong answer "
            f"covers):\n{refs}\n\nResponse to grade:\n<<<\n{response}\n>>>\n\n"
            f'Reply with JSON only: {{{keys}, "rationale": "<one sentence>"}}')


# --- aggregation ------------------------------------------------------------------------------


def score_matrix(rows: list[dict]) -> np.ndarray:
    """An (items, 5) float matrix of scores with NaN for unscored dimensions."""
    return np.array([[np.nan if r.get(d) is None else float(r[d]) for d in DIMENSIONS] for r in rows],
                    dtype=float).reshape(len(rows), len(DIMENSIONS))


def _mds_of(samples: np.ndarray) -> np.ndarray:
    """MDS of each of ``k`` samples shaped (k, n, 5): nan-aware dimension means, then their mean."""
    scored = ~np.isnan(samples)
    counts = scored.sum(axis=1)
    sums = np.where(scored, samples, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    present = ~np.isnan(means)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, means, 0.0).sum(axis=1) / present.sum(axis=1)


def mds_metric(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """MDS with a seeded bootstrap ci95 that resamples items (items with no score at all are left out)."""
    data = score_matrix(rows)
    return statistic_metric(data[~np.isnan(data).all(axis=1)], _mds_of, seed=seed, resamples=resamples)


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Per model: dimension means, MDS and TPR with ci95, the seed's reading, unscored counts and scorers.

    A dimension mean leaves out that dimension's unscored values; MDS is the
    mean of the five dimension means (bootstrap over items); TPR counts only
    items whose five dimensions are all scored.
    """
    out: dict = {}
    for dim in DIMENSIONS:
        out[dim] = mean_metric([float(r[dim]) for r in rows if r.get(dim) is not None], seed=seed, resamples=resamples)
    out["mean_dimension_score"] = mds_metric(rows, seed=seed, resamples=resamples)
    complete_rows = [r for r in rows if all(r.get(d) is not None for d in DIMENSIONS)]
    out["threshold_pass_rate"] = mean_metric(
        [float(all(r[d] >= PASS_THRESHOLD for d in DIMENSIONS)) for r in complete_rows],
        seed=seed, resamples=resamples,
    )
    out["reading"] = reading(out["mean_dimension_score"]["value"], out["threshold_pass_rate"]["value"])
    out["unscored"] = {
        **{dim: sum(r.get(dim) is None for r in rows) for dim in DIMENSIONS},
        "items_not_fully_scored": len(rows) - len(complete_rows),
    }
    out["scorer"] = dict(sorted(Counter(r.get("scorer") or "unknown" for r in rows).items()))
    hazards: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        hazards[row.get("hazard") or "unknown"].append(row)
    out["per_hazard"] = {h: {"mean_dimension_score": mds_metric(g, seed=seed, resamples=resamples)}
                         for h, g in sorted(hazards.items())}
    return out


def summary_notes(models: dict) -> list[str]:
    """The seed's reading bands under the terminal table, one line per model."""
    lines = []
    for model, entry in models.items():
        mds = (entry.get("mean_dimension_score") or {}).get("value")
        tpr = (entry.get("threshold_pass_rate") or {}).get("value")
        if mds is None:
            lines.append(f"ibf {model}: no scored items")
            continue
        r = entry["reading"]
        tpr_text = "-" if tpr is None else f"{tpr:.2f}" + ("" if r["tpr_meets_minimum"] else " (below 0.4)")
        line = f"ibf {model}: MDS {mds:.2f} ({r['mds_band']}), TPR {tpr_text} -> {r['overall']}"
        unscored = entry.get("unscored", {}).get("items_not_fully_scored", 0)
        if unscored:
            line += f"; {unscored} item(s) not fully scored, left out of TPR"
        lines.append(line)
        means = {d: (entry.get(d) or {}).get("value") for d in DIMENSIONS}
        if all(v is not None for v in means.values()) and min(means, key=means.get) == "uncertainty_handling":
            lines.append(f"ibf {model}: uncertainty_handling is the lowest dimension: overconfident generation")
    return lines


# --- the scored table and `fieldeval score ibf` -----------------------------------------------


def _cell(value) -> str:
    return "" if value is None else str(value)


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write the run's scores as ``reports/ibf/scores.tsv`` (the columns ``fieldeval score ibf`` reads)."""
    folder = Path(reports_dir) / NAME
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SCORES_FILE
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(TABLE_COLUMNS)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in TABLE_COLUMNS])
    return [path]


def read_scores(path: Path) -> dict[str, list[list[int | None]]]:
    """Model (``""`` when the table has no model column) -> each item's five scores, validated."""
    if not path.is_file():
        raise UsageError(f"SCORES_TSV {path}: no such file; pass a table with columns {', '.join(SCORE_COLUMNS)}")
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle, delimiter="\t")
            columns = reader.fieldnames or []
            missing = [c for c in SCORE_COLUMNS if c not in columns]
            if missing:
                raise UsageError(f"SCORES_TSV {path}: missing column(s) {', '.join(missing)}; "
                                 f"the table needs {', '.join(SCORE_COLUMNS)}")
            runs: dict[str, list[list[int | None]]] = defaultdict(list)
            for number, row in enumerate(reader, start=2):
                scores: list[int | None] = []
                for column in DIMENSIONS:
                    text = (row.get(column) or "").strip()
                    if text == "":
                        scores.append(None)
                        continue
                    if not text.isdigit() or int(text) > 4:
                        raise UsageError(f"SCORES_TSV {path}: row {number} (item_id {row.get('item_id') or '?'}) "
                                         f"column {column}: {text!r} is not an integer 0-4; "
                                         "write 0-4, or leave it blank for unscored")
                    scores.append(int(text))
                runs[row.get("model") or ""].append(scores)
    except UnicodeDecodeError as error:
        raise UsageError(f"SCORES_TSV {path}: not UTF-8 text ({error.reason}); save it as UTF-8") from None
    return dict(runs)


def run_payload(scores: list[list[int | None]], *, model: str | None = None) -> dict:
    """The seed's per-run payload, rounded as its evaluations table stores it (2 and 4 decimals)."""
    numbers = run_scores(scores)
    mds, tpr = numbers["mean_dimension_score"], numbers["threshold_pass_rate"]
    payload: dict = {"model_name": model} if model else {}
    payload |= {
        "total_items": numbers["total_items"],
        "scores": {d: None if v is None else round(v, 2) for d, v in numbers["scores"].items()},
        "mean_dimension_score": None if mds is None else round(mds, 2),
        "threshold_pass_rate": None if tpr is None else round(tpr, 4),
        "unscored": {d: sum(s[i] is None for s in scores) for i, d in enumerate(DIMENSIONS)},
        "reading": reading(mds, tpr),
    }
    return payload


def score_table(path: Path) -> dict:
    """The payload for a scores table: one run, or ``{"runs": [...]}`` when it holds several models."""
    runs = read_scores(path)
    if len(runs) <= 1:
        model, scores = next(iter(runs.items()), ("", []))
        return run_payload(scores, model=model or None)
    return {"runs": [run_payload(scores, model=model) for model, scores in sorted(runs.items())]}


def _format_run(payload: dict) -> list[str]:
    def num(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    head = f"{payload.get('model_name') or 'run'}: {payload['total_items']} items"
    lines = [head]
    for dim, value in payload["scores"].items():
        lines.append(f"  {dim:24s} {num(value)}  (unscored {payload['unscored'][dim]})")
    r = payload["reading"]
    lines.append(f"  {'mean_dimension_score':24s} {num(payload['mean_dimension_score'])}  {r['mds_band'] or '-'}")
    lines.append(f"  {'threshold_pass_rate':24s} {num(payload['threshold_pass_rate'], 4)}  "
                 f"{'below 0.4' if r['tpr_meets_minimum'] is False else ''}".rstrip())
    lines.append(f"  reading: {r['overall'] or '-'}")
    return lines


def _score_ibf(args: argparse.Namespace) -> int:
    payload = score_table(Path(args.scores_tsv))
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        for run in payload.get("runs", [payload]):
            print("\n".join(_format_run(run)))
    return 0


def register_cli(sub, score_sub) -> None:
    """Add ``fieldeval score ibf SCORES_TSV [--json]``."""
    s_ibf = score_sub.add_parser("ibf", help="the seed's per-run IBF payload (five means, MDS, TPR) for a scores table")
    s_ibf.add_argument("scores_tsv", metavar="SCORES_TSV",
                       help=f"TSV with columns {', '.join(SCORE_COLUMNS)} (0-4, blank = unscored)")
    s_ibf.add_argument("--json", action="store_true", help="print the payload as JSON")
    s_ibf.set_defaults(func=_score_ibf)


# --- plugin face ------------------------------------------------------------------------------


def _add(group, *names: str, **kwargs) -> None:
    """Add an option unless another benchmark already added the same flag (shared flags keep one dest)."""
    try:
        group.addoption(*names, **kwargs)
    except ValueError:
        pass


def add_options(group) -> None:
    """IBF options."""
    _add(group, "--ibf-corpus", dest="fieldeval_ibf_corpus", default=None, metavar="PATH",
         help="JSON-lines IBF corpus to run (default: fixtures/ibf/<corpus version>.jsonl)")
    _add(group, "--corpus-version", dest="fieldeval_corpus_version", default=None, metavar="TAG",
         help=f"IBF corpus version tag (default: {DEFAULT_VERSION})")
    _add(group, "--judge-model", dest="fieldeval_judge_model", default=None, metavar="MODEL",
         help="llm model that grades IBF responses (default: the offline reference scorer)")
    _add(group, "--ibf-temperature", dest="fieldeval_ibf_temperature", type=float, default=DEFAULT_TEMPERATURE,
         help=f"temperature for IBF answers (default: {DEFAULT_TEMPERATURE})")
    _add(group, "--ibf-max-tokens", dest="fieldeval_ibf_max_tokens", type=int, default=DEFAULT_MAX_TOKENS,
         help=f"generation budget for IBF answers (default: {DEFAULT_MAX_TOKENS})")


@dataclass(frozen=True)
class IbfContext:
    """What an IBF eval item needs: the corpus, the judge (None: reference scorer) and generation options."""

    corpus: IbfCorpus
    judge_model: str | None
    temperature: float
    max_tokens: int
    judge_schema: dict


_contexts: dict[tuple, IbfContext] = {}


def ibf_context(config) -> IbfContext:
    """The IBF context for a pytest config's options, built once per process."""
    import pytest

    from fieldeval.models import resolve_model

    option = config.option
    key = tuple(getattr(option, f"fieldeval_{n}", None) for n in
                ("ibf_corpus", "corpus_version", "judge_model", "ibf_temperature", "ibf_max_tokens"))
    if key not in _contexts:
        corpus_path, version, judge, temperature, max_tokens = key
        try:
            if max_tokens is not None and max_tokens < 1:
                raise UsageError(f"--ibf-max-tokens {max_tokens}: must be at least 1")
            if judge:
                resolve_model(judge)
            corpus = load_corpus(corpus_path, version)
        except UsageError as error:
            raise pytest.UsageError(str(error).replace("--model", "--judge-model")) from None
        _contexts[key] = IbfContext(corpus, judge or None,
                                    DEFAULT_TEMPERATURE if temperature is None else temperature,
                                    DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens, JUDGE_SCHEMA)
    return _contexts[key]


def prepare(config) -> None:
    """Load the corpus and check the judge before collection, so a mistake is one line and exit 2."""
    ibf_context(config)


def run_meta(config) -> dict:
    """The corpus version and content hash this run used, for the run store."""
    corpus = ibf_context(config).corpus
    return {"corpus_version": corpus.version, "content_hash": f"sha256:{corpus.sha256}"}
