"""Where the run store is: ``$FIELDEVAL_STORE``, else ``reports/fieldeval.db`` under the project root; stdlib only.

One rule for pytest and every ``fieldeval`` command, so that ``pytest evals``
followed by ``fieldeval runs list`` reads the same store. The project root is
found the way pytest finds its rootdir: the nearest folder, from the current
one upwards, holding ``pyproject.toml`` (or pytest's ``pytest.ini``,
``tox.ini``, ``setup.cfg``); else the topmost one holding ``conftest.py``;
else the current folder.

:mod:`fieldeval.calls.endpoints` reads the store on every llm model lookup, so this
module (and :mod:`fieldeval.store.registry`) must not import SQLAlchemy.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STORE_PATH = Path("reports") / "fieldeval.db"  # under the project root
STORE_ENV = "FIELDEVAL_STORE"
ROOT_FILES = ("pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg")


def project_root(start: str | Path | None = None) -> Path:
    """The project root above ``start`` (default: the current folder), as pytest finds its rootdir.

    Example:
        >>> project_root("/home/me/mybench/evals")  # doctest: +SKIP
        PosixPath('/home/me/mybench')
    """
    here = Path(start if start is not None else Path.cwd()).resolve()
    folders = [here, *here.parents]
    for folder in folders:
        if any((folder / name).is_file() for name in ROOT_FILES):
            return folder
    with_conftest = [folder for folder in folders if (folder / "conftest.py").is_file()]
    return with_conftest[-1] if with_conftest else here


def default_store_path(start: str | Path | None = None) -> Path:
    """``reports/fieldeval.db`` under the :func:`project_root` of ``start``."""
    return project_root(start) / DEFAULT_STORE_PATH


def default_store_url(start: str | Path | None = None) -> str:
    """``$FIELDEVAL_STORE`` when set, else the SQLite file ``reports/fieldeval.db`` under the project root."""
    return os.environ.get(STORE_ENV) or f"sqlite:///{default_store_path(start)}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL or bare path; None for a server URL."""
    if "://" not in url:
        return Path(url).expanduser()
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return None
    rest = rest.split("?")[0]  # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy reads them
    return Path(rest[1:] if rest.startswith("/") else rest).expanduser()
