"""Files fieldeval ships: the value sets (``enum_data/``) and ``fixtures/``, found through importlib.resources.

In a checkout they are the repository's top-level folders; in a wheel they
travel as package data of ``fieldeval.bundled``.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path


def bundled(*parts: str) -> Path:
    """The path of a shipped file or folder, e.g. ``bundled("fixtures", "ibf")``."""
    resource = files("fieldeval.bundled").joinpath(*parts)
    with as_file(resource) as path:  # a real path for installed packages and checkouts alike
        return Path(path)
