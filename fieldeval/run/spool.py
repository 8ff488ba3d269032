"""The controller's recorded rows while the session runs: on disk, not in memory.

Each passed eval item's row arrives as the JSON text its ``record`` call wrote.
:class:`RowSpool` appends it as one line to a file in the session folder (or
keeps the texts in memory when the session has no folder), and keeps its
benchmark and node id in memory (the item's own node id object, which the
parsed row then shares). :meth:`RowSpool.drain` parses them once, when the
session ends, into dicts ordered by node id. A run of 100,000 items holds none
of its rows while it runs, and its cyclic collector never walks them.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from operator import itemgetter
from pathlib import Path

SPOOL_FILE = "rows.spool"


class RowSpool:
    """Rows by benchmark as JSON texts: appended while the session runs, parsed once by :meth:`drain`.

    A line that cannot be written (a full disk) is cut back off the file, and it and every later one
    are kept in memory instead: no row is lost.
    """

    def __init__(self, folder: Path | None) -> None:
        self.path = Path(folder) / SPOOL_FILE if folder is not None else None
        self._fd: int | None = None
        self._size = 0  # bytes of whole lines in the file
        self._texts: list[str] = []  # the lines kept in memory (no folder, or the disk filled up)
        self._benchmarks: list[str] = []  # each line's benchmark and node id, in order (the item's own node id
        self._nodeids: list[str] = []  # object, which the parsed row then shares)
        self.count = 0

    def add(self, benchmark: str, nodeid: str, text: str) -> None:
        """One row: its benchmark, its item's node id and the JSON object ``record`` wrote."""
        self._benchmarks.append(sys.intern(benchmark))
        self._nodeids.append(nodeid)
        line = text.replace("\n", " ") + "\n"  # a newline can only be whitespace between a JSON text's tokens
        self.count += 1
        if self.path is not None and not self._texts:
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                data = line.encode("utf-8", "surrogatepass")
                if os.write(self._fd, data) == len(data):
                    self._size += len(data)
                    return
            except OSError:
                pass
            if self._fd is not None:
                try:
                    os.ftruncate(self._fd, self._size)  # no half line stays behind
                except OSError:
                    pass
        self._texts.append(line)

    def drain(self, parse: Callable[[dict], dict]) -> dict[str, list[dict]]:
        """Every row added since the last drain, by benchmark, each through ``parse`` and with its ``nodeid``,
        in node id order; the spool is empty afterwards. Rows are parsed :data:`PARSE_CHUNK` at a time, as
        one JSON array (its objects share their keys): about twice as fast as a parse a row."""
        out: defaultdict[str, list[dict]] = defaultdict(list)
        heads = zip(self._benchmarks, self._nodeids)
        texts: list[str] = []

        def flush() -> None:
            for row, (benchmark, nodeid) in zip(_parse_all(texts), heads):  # the rows first: zip takes no head
                # past the chunk's last row
                row = parse(row)
                row["nodeid"] = nodeid
                out[benchmark].append(row)
            texts.clear()

        for line in self._lines():
            texts.append(line)
            if len(texts) >= PARSE_CHUNK:
                flush()
        flush()
        self._benchmarks, self._nodeids = [], []
        for rows in out.values():
            rows.sort(key=itemgetter("nodeid"))
        self.count = 0
        return dict(out)

    def _lines(self) -> Iterator[str]:
        if self._fd is not None:
            self.close()
            with open(self.path, encoding="utf-8", errors="surrogatepass") as handle:
                yield from handle
            self.path.unlink(missing_ok=True)
            self._size = 0
        lines, self._texts = self._texts, []
        yield from lines

    def __bool__(self) -> bool:
        return self.count > 0

    def close(self) -> None:
        """Close the file (the controller removes the session folder, and the spool with it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


PARSE_CHUNK = 2_000  # spooled rows parsed by one json.loads


def _parse_all(texts: list[str]) -> list:
    """Each JSON text's value, parsed as one array when every text is one value (else one at a time)."""
    if not texts:
        return []
    try:
        values = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        values = None
    if values is None or len(values) != len(texts):  # a text that is not one value: parse each, as written
        values = [json.loads(text) for text in texts]
    return values


__all__ = ["PARSE_CHUNK", "SPOOL_FILE", "RowSpool"]
