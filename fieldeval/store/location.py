"""Where the run store is: ``$FIELDEVAL_STORE`` or ``reports/fieldeval.db``; stdlib only.

:mod:`fieldeval.endpoints` reads the store on every llm model lookup, so this
module (and :mod:`fieldeval.store.registry`) must not import SQLAlchemy.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STORE_PATH = PROJECT_ROOT / "reports" / "fieldeval.db"
STORE_ENV = "FIELDEVAL_STORE"


def default_store_url() -> str:
    """``$FIELDEVAL_STORE`` when set, else the SQLite file ``reports/fieldeval.db`` under the project root."""
    return os.environ.get(STORE_ENV) or f"sqlite:///{DEFAULT_STORE_PATH}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL or bare path; None for a server URL."""
    if "://" not in url:
        return Path(url).expanduser()
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return None
    rest = rest.split("?")[0]  # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy reads them
    return Path(rest[1:] if rest.startswith("/") else rest).expanduser()
