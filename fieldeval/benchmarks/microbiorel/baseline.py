"""re-baseline: a supervised MicrobioRel relation classifier (TF-IDF + logistic regression).

It reads only the prompt: the paragraph, the two entities' types and
character offsets, and the offered classes. The paragraph is masked as the
upstream masked CSVs are (each entity replaced by ``@Type$``), and three
TF-IDF views feed one logistic regression: the whole masked paragraph, the
words between the two entities, and the entity-type pair. It is trained on
the train split, C is chosen by weighted F1 on dev, and the fitted model is
cached under ``cache_dir()/models/`` keyed by the data hashes. The answer is
the most probable offered class; a prompt without a class list (the
summarisation step) gets the sentence ``Entity1 class Entity2``.
"""

from __future__ import annotations

import fcntl
import pickle
import re
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


from fieldeval.atomic import atomic_path
from fieldeval.baselines import BaselineModel, registers

RECIPE_VERSION = "1"
C_GRID = (2.0, 8.0, 32.0, 128.0)

_PARAGRAPH = re.compile(r"^Paragraph:\n<<<\n(?P<text>.*?)\n>>>$", flags=re.M | re.S)
_ENTITY = re.compile(r"^Entity (?P<k>[12]): (?P<name>.*) \(type (?P<type>[^,()]+), "
                     r"characters (?P<start>\d+)-(?P<end>\d+)\)$", flags=re.M)
_CLASS_LINE = re.compile(r"^- (?P<label>\S+)$")
# One prediction at a time in a process: scikit-learn's ColumnTransformer runs its views through
# sklearn.utils.parallel, whose wrapper empties the process-wide warning filters (resetwarnings) while it runs;
# a second thread's prediction that starts meanwhile finds no filters and warns "`sklearn.utils.parallel.delayed`
# should be used with ...", printed past pytest's capture (the solver pool's threads predict ahead).
_PREDICTING = threading.Lock()


@dataclass(frozen=True)
class PairInput:
    """What the baseline reads from a prompt: paragraph, entities (name, type, start, end), offered classes."""

    text: str
    entities: tuple[tuple[str, str, int, int], tuple[str, str, int, int]]
    classes: tuple[str, ...]


def parse_prompt(prompt: str) -> PairInput | None:
    """The pair a MicrobioRel prompt describes, or None when it is not one."""
    paragraph = _PARAGRAPH.search(prompt)
    found: dict[str, tuple[str, str, int, int]] = {}
    for match in _ENTITY.finditer(prompt):
        found.setdefault(match["k"], (match["name"], match["type"], int(match["start"]), int(match["end"])))
    if paragraph is None or set(found) != {"1", "2"}:
        return None
    classes: list[str] = []
    _, marker, rest = prompt.partition("\nRelation classes:\n")
    if marker:
        for line in rest.splitlines():
            match = _CLASS_LINE.match(line)
            if not match:
                break
            classes.append(match["label"])
    return PairInput(paragraph["text"], (found["1"], found["2"]), tuple(classes))


def mask_entities(text: str, first: tuple[int, int, str], second: tuple[int, int, str]) -> str:
    """The paragraph with each entity span replaced by ``@Type$``, as in the upstream masked CSVs."""
    for start, end, kind in sorted([first, second], reverse=True):
        text = f"{text[:start]}@{kind}${text[end:]}"
    return text


def features(text: str, first: tuple[int, int, str], second: tuple[int, int, str]) -> dict[str, str]:
    """The three text views of one pair: masked paragraph, words between the entities, type pair."""
    (s1, e1, t1), (s2, e2, t2) = sorted([first, second])
    return {
        "masked": mask_entities(text, first, second),
        "between": text[e1:s2] if s2 >= e1 else "",
        "types": f"{first[2]}_{second[2]} from_{first[2]} to_{second[2]}",
    }


def _pipeline(c: float):
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    views = ColumnTransformer([
        ("masked", TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, token_pattern=r"[@$\w]+"), "masked"),
        ("between", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), "between"),
        ("types", TfidfVectorizer(token_pattern=r"\S+", lowercase=False), "types"),
    ])
    return Pipeline([("views", views),
                     ("clf", LogisticRegression(C=c, max_iter=3000, class_weight="balanced"))])


def _frame(cases):
    import pandas as pd

    return pd.DataFrame([features(case.text, (case.source.start, case.source.end, case.source.type),
                                  (case.target.start, case.target.end, case.target.type)) for case in cases])


def train() -> tuple[object, dict[str, float]]:
    """Fit on train for every C in the grid and keep the best by dev weighted F1; return it and its dev score."""
    from fieldeval.benchmarks.microbiorel.cases import load_split
    from scorers.microbiorel import weighted_f1

    train_cases, dev_cases = load_split("train"), load_split("dev")
    x_train, y_train = _frame(train_cases), [c.gold for c in train_cases]
    x_dev, y_dev = _frame(dev_cases), [c.gold for c in dev_cases]
    best: tuple[float, float, object] | None = None
    for c in C_GRID:
        model = _pipeline(c).fit(x_train, y_train)
        score = weighted_f1(y_dev, list(model.predict(x_dev)))
        if best is None or score > best[0]:
            best = (score, c, model)
    score, c, model = best
    return model, {"C": c, "dev_weighted_f1": score}


def model_path() -> Path:
    """Where the fitted model is cached: keyed by the train/dev hashes, the recipe and scikit-learn's version."""
    import hashlib

    import sklearn

    from fieldeval.benchmarks.microbiorel.cases import SPLIT_FILES
    from fieldeval.data import REGISTRY, cache_dir

    key = "|".join([REGISTRY[SPLIT_FILES["train"]].sha256, REGISTRY[SPLIT_FILES["dev"]].sha256,
                    RECIPE_VERSION, sklearn.__version__])
    return cache_dir() / "models" / f"microbiorel-re-baseline-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pkl"


@lru_cache(maxsize=1)
def load_model():
    """The fitted classifier: from the disk cache, or trained once and cached atomically (memoised).

    Concurrent processes (xdist workers, parallel ``llm`` calls) wait on a file
    lock while one of them trains, then read its result.
    """
    path = model_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        model = _read_model(path)
        if model is None:
            print("re-baseline: training on the MicrobioRel train split (first run only; about 2 minutes)...",
                  file=sys.stderr, flush=True)
            model, info = train()
            with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                pickle.dump({"model": model, **info}, handle, protocol=pickle.HIGHEST_PROTOCOL)
            print(f"re-baseline: trained (dev weighted F1 {info.get('dev_weighted_f1', float('nan')):.3f}), "
                  f"cached at {path}", file=sys.stderr, flush=True)
    return model


def _read_model(path: Path):
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)["model"]
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, AttributeError):
        return None  # a damaged cache entry is rebuilt


def classify(pair: PairInput) -> str:
    """The most probable offered class for one pair (any class when the prompt offers none it knows)."""
    model = load_model()
    (_, t1, s1, e1), (_, t2, s2, e2) = pair.entities
    frame = _frame_from(pair.text, (s1, e1, t1), (s2, e2, t2))
    with _PREDICTING:
        probabilities = model.predict_proba(frame)[0]
    ranked = [label for _, label in sorted(zip(probabilities, model.classes_), key=lambda p: -p[0])]
    offered = set(pair.classes) & set(ranked)
    return next(label for label in ranked if label in offered) if offered else ranked[0]


def _frame_from(text: str, first: tuple[int, int, str], second: tuple[int, int, str]):
    import pandas as pd

    return pd.DataFrame([features(text, first, second)])


def predict(prompt: str) -> str:
    """The baseline's response to one MicrobioRel prompt."""
    pair = parse_prompt(prompt)
    if pair is None:
        return "None"
    label = classify(pair)
    if "Relation classes:" not in prompt:
        return f"{pair.entities[0][0]} {label} {pair.entities[1][0]}."
    return label


class MicrobioRelBaseline(BaselineModel):
    """Offline MicrobioRel baseline: TF-IDF views of the masked pair, logistic regression; never the answer."""

    model_id = "re-baseline"
    respond = staticmethod(predict)


register_models = registers(MicrobioRelBaseline)  # this module is an llm plugin
