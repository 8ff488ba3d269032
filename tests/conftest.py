"""Shared fixtures of the suite's own tests: the tiny ontology, its value sets, an isolated cache."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
import scipy.special  # noqa: F401
from hypothesis import settings

import fieldeval.run.session  # noqa: F401  (the engine: numpy, the call engine)
import fieldeval.store.core  # noqa: F401  (SQLAlchemy)

# scipy.special (the intervals' t quantile, imported when first needed) is imported here, before any in-process
# pytester run: such a run drops the modules it imported when it ends, and numpy's C extensions under it cannot
# be loaded a second time in one process ("cannot load module more than once per process"). The engine and the
# store come in here for the same reason: the plugin imports them only in a session that runs evals, and
# SQLAlchemy imported twice in one process breaks its internals.

# Hypothesis's profiles. ``ci`` (HYPOTHESIS_PROFILE=ci, which .ci/run and the workflow set) runs the same examples
# on every run (derandomize), so CI is reproducible; ``explore``, the default, draws new examples on each run and
# keeps the failing ones in .hypothesis/, so a developer's runs keep looking. Neither has a per-example deadline
# (a 200 ms deadline failed under load; speed is measured in benchmarks/, never in tests). A test's own
# @settings (max_examples) override the rest.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explore"))

ROOT = Path(__file__).resolve().parents[1]
TINY_OBO = ROOT / "fixtures" / "ontology" / "tiny.obo"
TINY_ENUMS = ROOT / "fixtures" / "enum_tiny"
TINY_SELECTOR = f"simpleobo:{TINY_OBO}"


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep indexes and downloads of the tests out of the user's cache."""
    folder = tmp_path_factory.mktemp("cache")
    old = os.environ.get("FIELDEVAL_CACHE_DIR")
    os.environ["FIELDEVAL_CACHE_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("FIELDEVAL_CACHE_DIR", None)
    else:
        os.environ["FIELDEVAL_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def tiny_index():
    """The index of the hand-written tiny ENVO fixture."""
    from fieldeval.ontology import load_index

    return load_index(TINY_SELECTOR)


@pytest.fixture(scope="session")
def tiny_enums() -> dict[str, frozenset[str]]:
    """The tiny value sets: soil has terrestrial terms, the other three only marine biome."""
    from fieldeval.benchmarks.ebs.enums import load_enums

    return load_enums(TINY_ENUMS)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The upstream data mirror; tests that read it skip where FIELDEVAL_DATA_DIR is unset."""
    value = os.environ.get("FIELDEVAL_DATA_DIR")
    if not value:
        pytest.skip("FIELDEVAL_DATA_DIR is not set")
    return Path(value)


def pg_schema_url(base: str, schema: str) -> str:
    """The PostgreSQL URL with its search_path set to one schema (a fresh store per test)."""
    return f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={schema}')}"


@contextmanager
def fresh_pg_store() -> Iterator[str]:
    """A URL of an empty store in a new schema of $FIELDEVAL_TEST_PG, dropped afterwards; skips where it is unset."""
    base = os.environ.get("FIELDEVAL_TEST_PG")
    if not base:
        pytest.skip("FIELDEVAL_TEST_PG is not set; run `eval \"$(.ci/postgres.sh)\"` to test PostgreSQL")
    import psycopg

    schema = "t_" + secrets.token_hex(4)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield pg_schema_url(base, schema)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh, empty store URL on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    with fresh_pg_store() as url:
        yield url
