"""Files replaced whole: write beside the target, then rename, so a reader never sees half a file."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target``; when the block ends normally it replaces ``target``, else it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) whole."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def copy_atomic(source: Path, target: Path) -> None:
    """Replace ``target`` with a copy of ``source`` whole."""
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


__all__ = ["atomic_path", "copy_atomic", "write_atomic"]
