"""env_broad_scale suites: the llm-matrix suite format, its cases, and ``fieldeval generate ebs``."""

from __future__ import annotations

import fcntl
import json
import random
import re
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fieldeval.benchmarks.ebs.enums import load_enum_terms
from fieldeval.atomic import atomic_path
from fieldeval.data import cache_dir, fetch, sha256_of
from fieldeval.errors import UsageError
from fieldeval.inputs import read_tsv, read_yaml

SUITE_FILE = "nmdc-ai-eval/ebs-suite.yaml"

INPUT_COLUMNS = [
    "study_name",
    "description",
    "notes",
    "sampleData",
    "env_local_scale",
    "env_medium",
    "geo_loc_name",
    "depth",
    "analysis_type",
]
TARGET_COLUMN = "env_broad_scale"
DESCRIPTION_LIMIT = 500

SYSTEM_PROMPT = (
    "You are an expert in environmental ontologies (ENVO) and the MIxS metadata standard.\n"
    "Given metadata about an NMDC biosample, predict the env_broad_scale value.\n\n"
    "Your answer MUST be in the exact format: label [CURIE]\n"
    "For example: terrestrial biome [ENVO:00000446]\n\n"
    "Use only ENVO terms. Reply with ONLY the env_broad_scale value, nothing else."
)

PROMPT_TEMPLATE = (
    "Predict the env_broad_scale (broad-scale environmental context) for this biosample.\n\n"
    "Study: {study_name}\n"
    "Description: {description}\n"
    "Notes: {notes}\n"
    "Environmental package: {sampleData}\n"
    "env_local_scale: {env_local_scale}\n"
    "env_medium: {env_medium}\n"
    "Geographic location: {geo_loc_name}\n"
    "Depth: {depth}\n"
    "Analysis type: {analysis_type}\n"
    "{allowed_values_section}"
)

_NOT_ID = re.compile(r"[^A-Za-z0-9]+")  # what a pytest id writes as one underscore


@dataclass(frozen=True)
class EbsCase:
    """One env_broad_scale case from a suite.

    Attributes:
        case_id: position in the suite, e.g. ``case017``.
        stratum: the truth's label (the suite is stratified on it).
        template: the MIxS environmental package (``sampleData``).
        prompt: the rendered prompt, verbatim from the suite.
        ideal: the truth as ``label [CURIE]``.
        study: the study the biosample comes from (the case's cluster), from the suite's ``cluster`` or
            ``study`` field, else the prompt's ``Study:`` line; empty when none.
    """

    case_id: str
    stratum: str
    template: str
    prompt: str
    ideal: str
    study: str = ""

    @property
    def test_id(self) -> str:
        """A readable pytest id: stratum and case."""
        return f"{_NOT_ID.sub('_', self.stratum).strip('_')}-{self.case_id}"


@dataclass(frozen=True)
class EbsSuite:
    """A suite: its system prompt, cases (a :class:`SuiteCases`, or a tuple) and content hash."""

    name: str
    system: str
    cases: Sequence[EbsCase]
    sha256: str
    matrix: dict | None = None  # the suite's ``matrix:`` block (``hyperparameters``: model, temperature, ...)


def study_of(raw: dict) -> str:
    """A suite case's study: its ``cluster`` or ``study`` field, else the ``Study:`` line of its input (without
    a trailing sample-set code in parentheses).

    Example:
        >>> study_of({"input": "Predict.\\nStudy: Soil warming (AY23_plt05)\\nDescription: ..."})
        'Soil warming'
    """
    original = raw.get("original_input") if isinstance(raw.get("original_input"), dict) else {}
    for value in (raw.get("cluster"), raw.get("study"), original.get("cluster"), original.get("study")):
        if value not in (None, ""):
            return str(value)
    found = re.search(r"^Study:[ \t]*(.+)$", str(raw.get("input") or ""), flags=re.MULTILINE)
    # the line may end in a sample-set code, "... climate change (AY23_plt05)": one study, not one per code
    return re.sub(r"\s*\([A-Za-z0-9_.-]+\)$", "", found.group(1).strip()) if found else ""
SUITE_CACHE_FORMAT = 4  # 2: each case's study (its cluster); 3: the suite's matrix; 4: an index of the test ids
BLOCK = 256  # cases read at once
KEPT_BLOCKS = 8  # blocks kept in memory per process (a few MB)


class SuiteCases(Sequence[EbsCase]):
    """A suite's cases, read by position from its compact form (SQLite) in the cache folder.

    Nothing but the count and the last few blocks of cases read is held in memory:
    ``cases[i]`` reads the block of :data:`BLOCK` cases around ``i``, so a process
    that runs a share of a large suite holds the cases of its share only.
    Safe to use from several threads.
    """

    def __init__(self, path: Path, count: int) -> None:
        self.path = Path(path)
        self._count = count
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._blocks: dict[int, list[tuple]] = {}  # the last KEPT_BLOCKS blocks read, oldest first

    def __len__(self) -> int:
        return self._count

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True,
                                             check_same_thread=False)
            return self._conn.execute(sql, params).fetchall()

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(self._count))]
        if position < 0:
            position += self._count
        if not 0 <= position < self._count:
            raise IndexError(position)
        start = position - position % BLOCK
        block = self._blocks.get(start)
        if block is None:  # items run in order: one read serves the next BLOCK cases
            block = self._query("SELECT case_id, stratum, template, prompt, ideal, study FROM cases WHERE n >= ? AND n < ? "
                                "ORDER BY n", (start, start + BLOCK))
            with self._lock:
                self._blocks[start] = block
                while len(self._blocks) > KEPT_BLOCKS:
                    self._blocks.pop(next(iter(self._blocks)))
        return EbsCase(*block[position - start])

    def __iter__(self) -> Iterator[EbsCase]:
        for start in range(0, self._count, 1000):
            rows = self._query("SELECT case_id, stratum, template, prompt, ideal, study FROM cases WHERE n >= ? AND n < ? "
                               "ORDER BY n", (start, start + 1000))
            yield from (EbsCase(*row) for row in rows)

    def test_ids(self) -> list[str]:
        """Every case's pytest id, in order, without reading the prompts."""
        return [test_id for (test_id,) in self._query("SELECT test_id FROM cases ORDER BY n")]

    def __getstate__(self) -> dict:
        return {"path": self.path, "count": self._count}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["count"])

    def __repr__(self) -> str:
        return f"SuiteCases({self._count} cases in {self.path})"


def load_suite(path: str | Path | None = None) -> EbsSuite:
    """Load an llm-matrix suite YAML; None means the pinned upstream suite.

    The YAML is parsed once per machine: its cases go to a compact SQLite file in
    the cache folder, keyed by the suite's sha256, and every later load (every
    pytest process, every xdist worker or shard) reads the cases from there by
    position, lazily (:class:`SuiteCases`).
    """
    path = Path(path) if path else fetch(SUITE_FILE)
    if not path.is_file():
        raise UsageError(f"--ebs-suite {path}: no such file; pass a suite written by `fieldeval generate ebs`")
    digest = sha256_of(path)
    folder = cache_dir() / "suites"
    compact = folder / f"ebs-{SUITE_CACHE_FORMAT}-{digest[:32]}.sqlite"
    meta = _compact_meta(compact)
    if meta is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = open(folder / f"{compact.stem}.lock", "w")
        except OSError:  # no writable cache folder: the cases stay in memory
            name, system, cases, matrix = _parse_suite(path)
            return EbsSuite(name, system, tuple(cases), digest, matrix)
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one parser per machine; concurrent processes wait, then read
            meta = _compact_meta(compact)
            if meta is None:
                name, system, cases, matrix = _parse_suite(path)
                _write_compact(compact, name, system, cases, matrix)
                meta = (name, system, len(cases), matrix)
    name, system, count, matrix = meta
    return EbsSuite(name, system, SuiteCases(compact, count), digest, matrix)


def _parse_suite(path: Path) -> tuple[str, str, list[EbsCase], dict | None]:
    suite = read_yaml(path, what="--ebs-suite", hint="pass a suite written by `fieldeval generate ebs`")
    cases = []
    try:
        template = suite["templates"][suite.get("template") or next(iter(suite["templates"]))]
        system = template["system"]
        for number, raw in enumerate(suite["cases"] or []):
            original = raw.get("original_input") or {}
            tags = raw.get("tags") or []
            template_name = (original.get("sampleData") or (tags[0] if tags else "")
                             or _template_from_prompt(raw["input"]))
            for field, value in (("tags[0] or original_input.sampleData", template_name), ("input", raw["input"]),
                                 ("ideal", raw["ideal"])):
                if not isinstance(value, str):
                    raise TypeError(f"case {number}: {field} must be text, not {type(value).__name__}")
            stratum = re.sub(r"\s*\[.*\]\s*$", "", raw["ideal"]).lstrip("_")
            cases.append(EbsCase(f"case{number:03d}", stratum, template_name, raw["input"], raw["ideal"],
                                 study_of(raw)))
    except (KeyError, TypeError, AttributeError, StopIteration) as error:
        raise UsageError(f"--ebs-suite {path}: not an llm-matrix suite ({type(error).__name__}: {error})") from None
    if not cases:
        raise UsageError(f"--ebs-suite {path}: the suite has no cases; generate one with `fieldeval generate ebs`")
    matrix = suite.get("matrix") if isinstance(suite.get("matrix"), dict) else None
    return suite.get("name", path.stem), system, cases, matrix


def _write_compact(target: Path, name: str, system: str, cases: Sequence[EbsCase], matrix: dict | None) -> None:
    with atomic_path(target) as tmp:
        conn = sqlite3.connect(tmp)
        try:
            conn.execute("CREATE TABLE meta (name TEXT, system TEXT, count INTEGER, matrix TEXT)")
            conn.execute("CREATE TABLE cases (n INTEGER PRIMARY KEY, case_id TEXT, stratum TEXT, template TEXT, "
                         "prompt TEXT, ideal TEXT, test_id TEXT, study TEXT)")
            conn.execute("INSERT INTO meta VALUES (?, ?, ?, ?)",
                         (name, system, len(cases), json.dumps(matrix, default=str) if matrix else None))
            conn.executemany("INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             ((n, c.case_id, c.stratum, c.template, c.prompt, c.ideal, c.test_id, c.study)
                              for n, c in enumerate(cases)))
            conn.execute("CREATE INDEX cases_test_ids ON cases (n, test_id)")  # test_ids reads this, not the prompts
            conn.commit()
        finally:
            conn.close()


def _compact_meta(path: Path) -> tuple[str, str, int, dict | None] | None:
    """(name, system prompt, case count, matrix) of a compact suite, or None when it is missing or unreadable."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT name, system, count, matrix FROM meta").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return (row[0], row[1], int(row[2]), json.loads(row[3]) if row[3] else None) if row else None


def _template_from_prompt(prompt: str) -> str:
    match = re.search(r"^Environmental package:\s*(\S+)", prompt, flags=re.M)
    return match.group(1) if match else ""


def allowed_values_section(template: str, terms: dict[str, list[tuple[str, str]]]) -> str:
    """The prompt's allowed-values block for a template (empty when it has no value set)."""
    if template not in terms:
        return ""
    values = sorted(f"{label} [{curie}]" for curie, label in terms[template])
    lines = "\n".join(f"  - {value}" for value in values)
    return f"Allowed env_broad_scale values for {template}:\n{lines}\n\nChoose from the above list."


def generate_suite(
    source_tsv: Path,
    *,
    per_category: int = 10,
    min_pool: int = 10,
    seed: int = 42,
    enum_dir: Path | None = None,
    models: list[str] | None = None,
) -> tuple[dict, dict[str, int]]:
    """Build an llm-matrix suite from a source TSV by the upstream sampling rules.

    Rows with an empty target are dropped, rows are deduplicated on the nine
    input slots plus the target, strata with fewer than ``min_pool`` unique
    rows are left out, and ``per_category`` rows are sampled from each stratum
    with ``seed``. GOLD ecosystem columns never reach the prompt.

    Returns:
        The suite as a dict and the unique-row count of every stratum.
    """
    _, rows = read_tsv(source_tsv, what="SOURCE_TSV", required=[*INPUT_COLUMNS, TARGET_COLUMN])
    rows = [row for row in rows if (row[TARGET_COLUMN] or "").strip()]
    seen: set[tuple[str, ...]] = set()
    pools: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        key = tuple(row[c] or "" for c in [*INPUT_COLUMNS, TARGET_COLUMN])
        if key not in seen:
            seen.add(key)
            pools[row[TARGET_COLUMN]].append(row)
    rng = random.Random(seed)
    terms = load_enum_terms(enum_dir)
    cases = []
    for category in sorted(c for c, pool in pools.items() if len(pool) >= min_pool):
        pool = pools[category]
        for row in rng.sample(pool, min(per_category, len(pool))):
            values = {c: (row[c] or "").lstrip("_") for c in INPUT_COLUMNS}
            if len(values["description"]) > DESCRIPTION_LIMIT:
                values["description"] = values["description"][: DESCRIPTION_LIMIT - 3] + "..."
            values["allowed_values_section"] = allowed_values_section(row["sampleData"], terms)
            ideal = row[TARGET_COLUMN].lstrip("_")
            cases.append({
                "input": PROMPT_TEMPLATE.format(**values),
                "ideal": ideal,
                "tags": [row["sampleData"], ideal],
                "original_input": {
                    "study_name": row["study_name"],
                    "sampleData": row["sampleData"],
                    "env_broad_scale": row[TARGET_COLUMN],
                },
            })
    suite = {
        "name": "nmdc-ebs-prediction",
        "description": f"Predict env_broad_scale from non-GOLD biosample metadata. Generated from {Path(source_tsv).name}.",
        "template": "predict_ebs",
        "templates": {"predict_ebs": {"system": SYSTEM_PROMPT, "prompt": "{input}", "metrics": ["simple_question"]}},
        "matrix": {"hyperparameters": {"model": models or [], "temperature": [0.0]}},
        "cases": cases,
    }
    return suite, {category: len(pool) for category, pool in sorted(pools.items())}
