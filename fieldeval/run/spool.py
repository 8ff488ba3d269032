"""The controller's recorded rows while the session runs: on disk, not in memory.

Each passed eval item's row arrives as the JSON text its ``record`` call wrote.
:class:`RowSpool` appends it as one line to a file in the session folder (or
keeps the texts in memory when the session has no folder), and keeps its
benchmark and node id in memory (the item's own node id object, which the
parsed row then shares). :meth:`RowSpool.drain` parses them once, when the
session ends, into dicts ordered by node id. A run of 100,000 items holds none
of its rows while it runs, and its cyclic collector never walks them.

A row recorded as a compact JSON object in ASCII (what ``record`` writes) goes
to the spool with its node id added as its last key: its line is then its line
of the rows file (``rows.jsonl``) as it is. The file stays until the rows file
is written: :meth:`RowSpool.lines` gives the rows file those lines straight from
the spool, consecutive ones a span of the file at a time, instead of encoding
the parsed rows again; :meth:`RowSpool.discard` then removes it.
"""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from pathlib import Path

import msgspec

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
        self._offsets = array("q")  # each line's place in the file (-1: kept in memory) and its bytes
        self._lengths = array("q")
        self._verbatim = bytearray()  # 1: the line is its row's line of the rows file, node id included (see lines)
        self._drained = 0  # lines parsed by earlier drains
        self._read_at = 0  # where the file's undrained lines start
        self.count = 0

    def add(self, benchmark: str, nodeid: str, text: str) -> None:
        """One row: its benchmark, its item's node id and the JSON object ``record`` wrote."""
        self._benchmarks.append(sys.intern(benchmark))
        self._nodeids.append(nodeid)
        line = text.replace("\n", " ")  # a newline can only be whitespace between a JSON text's tokens
        whole = len(line) > 2 and line[0] == "{" and line[-1] == "}" and line.isascii() and '"nodeid"' not in line
        if whole:  # the row's own line of the rows file: its node id as its last key, as json.dumps writes it
            line = f"{line[:-1]},\"nodeid\":{_encode(nodeid)}}}"
        self._verbatim.append(whole)
        line += "\n"
        self.count += 1
        if self.path is not None and not self._texts:
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                data = line.encode("utf-8", "surrogatepass")
                # written after the whole lines, wherever a cut-off write left the descriptor's position
                if os.pwrite(self._fd, data, self._size) == len(data):
                    self._offsets.append(self._size)
                    self._lengths.append(len(data))
                    self._size += len(data)
                    return
            except OSError:
                pass
            if self._fd is not None:
                try:
                    os.ftruncate(self._fd, self._size)  # no half line stays behind
                except OSError:
                    pass
        self._offsets.append(-1)
        self._lengths.append(0)
        self._texts.append(line)

    def drain(self, parse: Callable[[dict], dict]) -> dict[str, list[dict]]:
        """Every row added since the last drain, by benchmark, each through ``parse`` and with its ``nodeid``,
        in node id order; the spool is empty afterwards. Rows are parsed :data:`PARSE_CHUNK` at a time, as
        one JSON array (:func:`parse_texts`; its objects share their keys): about twice as fast as a parse a row."""
        out: defaultdict[str, list[dict]] = defaultdict(list)
        start = self._drained
        heads = zip(self._benchmarks[start:], self._nodeids[start:])
        texts: list[str] = []

        def flush() -> None:
            for row, (benchmark, nodeid) in zip(parse_texts(texts), heads):  # the rows first: zip takes no head
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
        self._drained = len(self._nodeids)
        for rows in out.values():
            rows.sort(key=itemgetter("nodeid"))
        self.count = 0
        return dict(out)

    def _lines(self) -> Iterator[str]:
        if self._fd is not None and self._size > self._read_at:
            with open(self.path, encoding="utf-8", errors="surrogatepass") as handle:
                handle.seek(self._read_at)
                yield from handle
            self._read_at = self._size
        lines, self._texts = self._texts, []
        yield from lines

    def lines(self, benchmark: str, rows: list[dict]) -> Iterable[dict | bytes]:
        """A benchmark's drained ``rows`` (in node id order, as the session sorts them) for the rows file: rows whose
        spool line is their rows-file line (see :meth:`add`) as bytes of the file, the lines of rows that follow
        each other in the file read as one span (at most :data:`SPAN_BYTES`); any other row (a resumed run's,
        one kept in memory, one not recorded as a compact JSON object in ASCII) as itself, to be encoded."""
        indices = [i for i, name in enumerate(self._benchmarks[:self._drained]) if name == benchmark]
        indices.sort(key=self._nodeids.__getitem__)  # stable, as the rows were sorted
        if self._fd is None or len(indices) != len(rows):
            return rows
        return self._lines_of(rows, indices)

    def _lines_of(self, rows: list[dict], indices: list[int]) -> Iterator[dict | bytes]:
        offsets, lengths, verbatim, nodeids = self._offsets, self._lengths, self._verbatim, self._nodeids
        with open(self.path, "rb") as handle:  # read a span at a time: a map of the file would count in the RSS
            fd = handle.fileno()
            span: list[dict] = []  # the rows of the pending span of the file, from start to end
            start = end = -1
            for row, i in zip(rows, indices):
                offset = offsets[i]
                if offset < 0 or not verbatim[i] or row.get("nodeid") is not nodeids[i]:
                    if span:
                        yield from _span(fd, start, end, span)
                        span = []
                    yield row
                    continue
                if span and (offset != end or end - start >= SPAN_BYTES):
                    yield from _span(fd, start, end, span)
                    span = []
                if not span:
                    start = end = offset
                span.append(row)
                end += lengths[i]
            if span:
                yield from _span(fd, start, end, span)

    def counts(self) -> Counter[str]:
        """The rows added since the last drain, by benchmark."""
        return Counter(self._benchmarks[self._drained:])

    def __bool__(self) -> bool:
        return self.count > 0

    def close(self) -> None:
        """Close the file (the controller removes the session folder, and the spool with it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Close and remove the file once the rows file is written (its lines are read no more): the disk it
        took is free again for the run's store. Rows added later are kept in memory."""
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


PARSE_CHUNK = 2_000  # spooled rows parsed as one JSON array (parse_texts)
SPAN_BYTES = 1 << 20  # the most of the spool file the rows file takes at once
_encode = json.JSONEncoder().encode  # a node id as json.dumps writes it (ASCII)
_decode = msgspec.json.Decoder().decode


def _span(fd: int, start: int, end: int, rows: list[dict]) -> Iterator[dict | bytes]:
    """The spool file's bytes from ``start`` to ``end``: the rows-file lines of ``rows``; the rows themselves if
    the file gives less (it was cut short since)."""
    data = os.pread(fd, end - start, start)
    if len(data) == end - start and data.endswith(b"}\n"):
        yield data
    else:
        yield from rows


def parse_texts(texts: list[str]) -> list:
    """Each JSON text's value, parsed as one array when every text is one value (else one at a time).

    The array goes through msgspec's decoder, about twice as fast as :func:`json.loads` and with the same
    values (integers of any size, correctly rounded floats, the last of repeated keys). What it refuses and
    the standard library reads (``NaN``, ``1e400``, a lone surrogate) is read by :func:`json.loads` instead.
    """
    if not texts:
        return []
    joined = "[" + ",".join(texts) + "]"
    try:
        values = _decode(joined)
    except ValueError:  # msgspec's DecodeError, or a lone surrogate that UTF-8 cannot hold
        try:
            values = json.loads(joined)
        except ValueError:
            values = None
    if values is None or len(values) != len(texts):  # a text that is not one value: parse each, as written
        values = [json.loads(text) for text in texts]
    return values


__all__ = ["PARSE_CHUNK", "SPOOL_FILE", "RowSpool", "parse_texts"]
