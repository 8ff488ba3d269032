"""Files replaced whole: write beside the target, then rename, so a reader never sees half a file.

Each file gets the mode a plain ``open(path, "w")`` gives it (0666 less the umask: 0644 as a rule), so
every output of a run reads alike; secrets (the serve token file) are written elsewhere, 0600.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILE_MODE = 0o666  # less the umask, as open() does


def _create_beside(target: Path) -> Path:
    """A new empty file beside ``target``, created exclusively (as ``tempfile.mkstemp`` does) with the umask's mode."""
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"{target.parent}: no free temporary name beside {target.name}")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target``; when the block ends normally it replaces ``target``, else it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) whole."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def copy_atomic(source: Path, target: Path) -> None:
    """Replace ``target`` with a copy of ``source`` whole."""
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


__all__ = ["atomic_path", "copy_atomic", "write_atomic"]
