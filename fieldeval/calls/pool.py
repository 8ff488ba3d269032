"""The call engine: every eval item's declared solver, run ahead in one bounded pool per session.

An eval module declares its model work as a solver, ``solve(case, model,
client) -> result`` (:class:`~fieldeval.calls.protocols.Solver`), named in its marker
(``pytest.mark.fieldeval(benchmark="ebs", solver=solve)``). The solver may
call ``client.complete()`` several times (summary then answer, answer then
judgement); ``client.context`` is the benchmark's context. The item itself
receives the result through the ``answer`` fixture, then scores and records
it: no test body runs twice and no fixture is stubbed.

The :class:`Board` is a SQLite file in the session folder that every process
of the session shares: one row per item (its pytest node id) that is
``planned``, ``running`` (with its owner's pid and a lease deadline),
``done`` (the pickled result) or ``failed`` (the model call error); the
models that failed permanently; the stop flag; and the session's solving
process. One process solves: with pytest-xdist the first worker (``gw0``),
else the only one. Its :class:`SolverPool` runs the session's daemon threads,
which claim the next planned row, whoever's item it is; the calls themselves
are bounded session-wide by the slots of :mod:`fieldeval.calls.limits`. The
other workers only score: they never build a client's model or a baseline, so
the trained baselines, llm and its providers live in one process. An item
whose row is not done waits for it only while its owner (for a planned row:
the solving process) is alive and its lease is fresh (a heartbeat renews it);
otherwise it claims the row and solves it itself, and a row whose owner died
or went silent it takes over. The solving process stays until every row is
solved, so the workers that are still scoring are served. So a dead worker
never blocks another, and every wait ends by a deadline. Once the stop flag is set (``-x``, ``--maxfail``,
Ctrl-C), no planned row starts. A solver whose item will fail (its model call
errored, or it crashed) counts on the board as it finishes, and the count that
reaches ``--maxfail`` sets the stop flag there and then, for every process,
before pytest reports the item. A process keeps a result in memory only while
one of its own items waits for it; every other result is read from the board.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fieldeval.calls.failures import ModelCallError
from fieldeval.run.writable import out_of_space

if TYPE_CHECKING:
    from fieldeval.calls.protocols import Completer
    from fieldeval.calls.records import Completion

LEASE_S = 30.0
POLL_MIN_S = 0.002
POLL_MAX_S = 0.05

Job = Callable[[], Any]


class Jobs(Protocol):
    """Item key (node id) -> its solver call, made when asked for; an entry goes once the pool took it."""

    def __iter__(self) -> Iterator[str]: ...

    def __len__(self) -> int: ...

    def get(self, key: str, default: Any = None) -> Job | None: ...

    def pop(self, key: str, default: Any = None) -> Job | None: ...


class SolverClient:
    """What a solver receives as ``client`` (a :class:`~fieldeval.calls.protocols.Client`): the session client's
    ``complete()`` and the benchmark's ``context``."""

    def __init__(self, client: Completer, context: Any) -> None:
        self.client = client
        self.context = context

    def complete(self, model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
                 max_tokens: int | None = None, schema: dict | None = None) -> Completion:
        """:meth:`fieldeval.ModelClient.complete`: cache, slots, timeout, retries, cost."""
        return self.client.complete(model_id, prompt, system=system, temperature=temperature, max_tokens=max_tokens,
                                    schema=schema)

    def complete_many(self, calls: Sequence[Mapping[str, Any]]) -> list[Completion]:
        """:meth:`complete` for each of calls that do not depend on each other, in order."""
        return [self.complete(**call) for call in calls]


class SolverCrash(RuntimeError):
    """A solver raised something other than a model call error (a bug in the benchmark): its traceback."""


class Board:
    """The session's shared plan of solver runs, in ``path`` (SQLite, WAL).

    Args:
        path: the board file (in the session folder).
        lease_s: how long a running row stays its owner's without a heartbeat.
    """

    def __init__(self, path: Path, *, lease_s: float = LEASE_S) -> None:
        self.path = Path(path)
        self.lease_s = lease_s
        # this process's one connection, one statement (or transaction) at a time; reentrant: Ctrl-C's handler stops
        # the board from the main thread, which may be inside a board call
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        with self._locked():
            db = self._connection()
            db.execute("CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
                       "state TEXT NOT NULL, owner INTEGER, lease REAL, payload BLOB)")
            db.execute("CREATE INDEX IF NOT EXISTS runs_planned ON runs (state, seq)")
            db.execute("CREATE TABLE IF NOT EXISTS dead (model TEXT PRIMARY KEY, message TEXT NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS stop (id INTEGER PRIMARY KEY CHECK (id = 0), reason TEXT NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS failures (id INTEGER PRIMARY KEY CHECK (id = 0), "
                       "n INTEGER NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS solver (id INTEGER PRIMARY KEY CHECK (id = 0), "
                       "pid INTEGER NOT NULL, lease REAL NOT NULL)")

    def _locked(self) -> threading.RLock:
        """The lock on this process's connection; a forked child makes its own (the parent's may be held)."""
        if self._pid != os.getpid():
            self._lock, self._conn, self._pid = threading.RLock(), None, os.getpid()
        return self._lock

    def _connection(self) -> sqlite3.Connection:
        """This process's connection to the board, under :meth:`_locked`. Its threads share one: a connection per
        thread keeps its own page cache, which every other connection's write makes stale; with 64 solver threads
        that cost 0.07-0.08 ms of CPU an item (``benchmarks/RESULTS.md``)."""
        if self._conn is None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")  # the board lives as long as the session; results are also cached
            self._conn = db
        return self._conn

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """The first row of one statement."""
        with self._locked():
            return self._connection().execute(sql, args).fetchone()

    def _change(self, sql: str, args: Sequence[Any] = ()) -> int:
        """How many rows one statement changed."""
        with self._locked():
            return self._connection().execute(sql, args).rowcount

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on this process's connection (``BEGIN IMMEDIATE``), committed when the block ends,
        rolled back when it raises."""
        with self._locked():
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back already (a full disk): the first error stands
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def plan(self, keys: Iterable[str]) -> None:
        """Add the keys (in order) as planned; keys already on the board keep their state."""
        with self._transaction() as db:
            db.executemany("INSERT OR IGNORE INTO runs (key, seq, state) VALUES (?, ?, 'planned')",
                           ((key, number) for number, key in enumerate(keys)))

    def claim_next(self, owner: int) -> str | None:
        """Claim the first planned row for ``owner``; None when none is left or the session is stopping."""
        row = self._one(
            "UPDATE runs SET state = 'running', owner = ?, lease = ? WHERE key = (SELECT key FROM runs "
            "WHERE state = 'planned' AND NOT EXISTS (SELECT 1 FROM stop) ORDER BY seq LIMIT 1) RETURNING key",
            (owner, time.time() + self.lease_s))
        return row[0] if row else None

    def claim(self, key: str, owner: int, *, state: str = "planned", previous: int | None = None) -> bool:
        """Claim one row that is ``planned`` (or ``running`` for ``previous``, taking it over)."""
        if state == "planned":
            sql, args = "state = 'planned' AND NOT EXISTS (SELECT 1 FROM stop)", ()
        else:
            sql, args = "state = 'running' AND owner = ?", (previous,)
        return self._change(f"UPDATE runs SET state = 'running', owner = ?, lease = ? WHERE key = ? AND {sql}",
                            (owner, time.time() + self.lease_s, key, *args)) == 1

    def finish(self, key: str, state: str, payload: bytes) -> None:
        """Record a row's result (``done``) or error (``failed``)."""
        self._change("UPDATE runs SET state = ?, payload = ?, lease = NULL WHERE key = ?", (state, payload, key))

    def release(self, key: str, owner: int) -> None:
        """Hand an unfinished row back (its owner is going away)."""
        self._change("UPDATE runs SET state = 'planned', owner = NULL, lease = NULL WHERE key = ? AND owner = ? "
                     "AND state = 'running'", (key, owner))

    def read(self, key: str) -> tuple[str, int | None, float | None, bytes | None] | None:
        """(state, owner, lease deadline, payload) of a row, or None when it is not on the board."""
        return self._one("SELECT state, owner, lease, payload FROM runs WHERE key = ?", (key,))

    def renew(self, owner: int) -> None:
        """Push back the lease of every row ``owner`` is running, and of its solving (its heartbeat)."""
        lease = time.time() + self.lease_s
        with self._locked():
            db = self._connection()
            db.execute("UPDATE runs SET lease = ? WHERE owner = ? AND state = 'running'", (lease, owner))
            db.execute("UPDATE solver SET lease = ? WHERE pid = ?", (lease, owner))

    def serve(self, pid: int) -> None:
        """Record ``pid`` as the session's solving process (its heartbeat keeps the lease)."""
        self._change("INSERT OR REPLACE INTO solver (id, pid, lease) VALUES (0, ?, ?)",
                     (pid, time.time() + self.lease_s))

    def solver(self) -> tuple[int, float] | None:
        """(pid, lease deadline) of the session's solving process, or None before one started."""
        return self._one("SELECT pid, lease FROM solver")

    def unsolved(self) -> int:
        """How many rows are planned or running."""
        return self._one("SELECT COUNT(*) FROM runs WHERE state IN ('planned', 'running')")[0]

    def stop(self, reason: str) -> None:
        """No planned row starts from now on, in any process."""
        self._change("INSERT OR IGNORE INTO stop (id, reason) VALUES (0, ?)", (reason,))

    def count_failure(self, maxfail: int, reason: str) -> int:
        """Count one failing item, session-wide; the count that reaches ``maxfail`` sets the stop flag with it."""
        with self._transaction() as db:
            failures = db.execute("INSERT INTO failures (id, n) VALUES (0, 1) ON CONFLICT (id) DO UPDATE SET "
                                  "n = n + 1 RETURNING n").fetchone()[0]
            if failures >= maxfail:
                db.execute("INSERT OR IGNORE INTO stop (id, reason) VALUES (0, ?)", (reason,))
        return failures

    def stopped(self) -> str | None:
        """Why the session is stopping, or None."""
        row = self._one("SELECT reason FROM stop")
        return row[0] if row else None

    def mark_dead(self, model: str, message: str) -> None:
        """Record that ``model`` failed permanently, so every process skips its remaining calls."""
        self._change("INSERT OR IGNORE INTO dead (model, message) VALUES (?, ?)", (model, message))

    def dead(self, model: str) -> str | None:
        """The permanent failure recorded for ``model``, if any."""
        row = self._one("SELECT message FROM dead WHERE model = ?", (model,))
        return row[0] if row else None

    def counts(self) -> dict[str, int]:
        """Rows per state (for tests and diagnostics)."""
        with self._locked():
            return dict(self._connection().execute("SELECT state, COUNT(*) FROM runs GROUP BY state").fetchall())


def alive(pid: int) -> bool:
    """Whether a process with this pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _outcome(job: Job) -> tuple[str, bytes]:
    """Run a solver: ("done", pickled result) or ("failed", pickled error)."""
    try:
        return "done", pickle.dumps(job())
    except ModelCallError as error:
        return "failed", pickle.dumps(("call", error.model, error.detail, error.kind))
    except Exception as error:  # noqa: BLE001 - a bug in the solver fails its item, with the traceback
        if out_of_space(error):  # the disk filled up under the solver (its cached answer, say): no bug of its
            return "failed", pickle.dumps(("full", str(error)))
        return "failed", pickle.dumps(("crash", traceback.format_exc()))


def fails_item(state: str, payload: bytes) -> bool:
    """Whether an outcome fails its item as pytest counts it: every failed solver but a skipped model call."""
    if state != "failed":
        return False
    value = pickle.loads(payload)
    return not (value[0] == "call" and value[3] == "skipped")


def _result(state: str, payload: bytes) -> Any:
    value = pickle.loads(payload)
    if state == "done":
        return value
    if value[0] == "call":
        raise ModelCallError(value[1], value[2], kind=value[3])
    if value[0] == "full":  # the session stops with its one full-disk line (fieldeval.run.writable)
        raise OSError(errno.ENOSPC, f"no space left on the device: {value[1]}")
    raise SolverCrash(value[1])


class SolverPool:
    """This process's solver threads and the items' view of the board.

    Args:
        board: the session's board.
        jobs: item key (node id) -> the solver call for that item.
        threads: how many solvers this process runs at once: ``--concurrency`` in the solving process, 0 in a
            process that only scores (it solves a row only when the solving process is gone).
        maxfail: pytest's ``--maxfail`` (1 for ``-x``, 0 for none): this many failing solvers stop the session.
    """

    def __init__(self, board: Board, jobs: Jobs, threads: int, *, maxfail: int = 0) -> None:
        self.board = board
        self.jobs = jobs
        self.pid = os.getpid()
        self.maxfail = maxfail
        self._stop = threading.Event()
        self._done: dict[str, tuple[str, bytes]] = {}  # outcomes an item of this process is waiting for
        self._waiting: set[str] = set()
        self._cond = threading.Condition()
        self._running: set[str] = set()
        count = max(1, min(threads, len(jobs))) if jobs and threads > 0 else 0
        self.solving = count > 0
        self._since: float | None = None  # when this scoring process first found no solving process
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"fieldeval-solver-{i}")
                         for i in range(count)]
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="fieldeval-heartbeat")

    def start(self, *, before_threads: Callable[[], None] | None = None) -> None:
        """Plan this process's items on the board and start the threads (in the solving process: serve, and run
        ``before_threads`` first, heartbeating meanwhile: ``--batch``'s rounds)."""
        self.board.plan(self.jobs)
        if self.solving:
            self.board.serve(self.pid)
        self._beat.start()
        if before_threads is not None:
            before_threads()
        for thread in self._threads:
            thread.start()

    def stop(self, reason: str | None = None) -> None:
        """Start no new solver here (and, with a reason, in every process of the session)."""
        if reason is not None:
            try:
                self.board.stop(reason)
            except sqlite3.Error:  # the session folder is already gone
                pass
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.board.lease_s / 4):
            try:
                self.board.renew(self.pid)
            except sqlite3.Error:
                return

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                with self._cond:  # claimed and marked running at once, so an item never mistakes it for stale
                    key = self.board.claim_next(self.pid)
                    if key is not None:
                        self._running.add(key)
                if key is None:
                    return
                job = self.jobs.get(key)
                if job is None:  # not an item of this process (cannot happen with xdist's identical collections)
                    with self._cond:
                        self._running.discard(key)
                    self.board.release(key, self.pid)
                    return
                self._run(key, job)
        except sqlite3.Error:  # the session folder went away: the session is over
            return

    def _claim(self, key: str, **how: Any) -> bool:
        with self._cond:
            if self.board.claim(key, self.pid, **how):
                self._running.add(key)
                return True
            return False

    def _run(self, key: str, job: Job) -> tuple[str, bytes]:
        """Run a claimed row's solver and record its outcome (the key is in ``_running``)."""
        try:
            state, payload = _outcome(job)
        except BaseException:
            with self._cond:
                self._running.discard(key)
            self.board.release(key, self.pid)
            raise
        if self.maxfail and fails_item(state, payload):  # before the row reads finished: no item outruns the stop
            self.board.count_failure(self.maxfail, "-x" if self.maxfail == 1 else f"--maxfail {self.maxfail}")
        self.board.finish(key, state, payload)
        with self._cond:
            self._running.discard(key)
            if key in self._waiting:
                self._done[key] = (state, payload)
            self._cond.notify_all()
        return state, payload

    def drain(self) -> None:
        """In the solving process: wait until every row is solved (the workers still scoring wait on them), unless
        the session is stopping; the lease and the owners' checks bound every other process's wait."""
        if not self.solving:
            return
        pause = POLL_MIN_S
        try:
            while not self._stop.is_set() and self.board.stopped() is None and self.board.unsolved():
                if not any(thread.is_alive() for thread in self._threads):
                    return  # the threads ran out of planned rows; running ones are other processes' now
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
        except sqlite3.Error:  # the session folder is already gone
            return

    def _served(self) -> bool:
        """Whether a planned row is the solving process's to solve (this process only scores, and the solving
        process is alive and heartbeating, or has had a lease's time to start)."""
        if self.solving:
            return False
        solver = self.board.solver()
        if solver is None:
            if self._since is None:
                self._since = time.monotonic()
            return time.monotonic() - self._since < self.board.lease_s
        pid, lease = solver
        return alive(pid) and lease >= time.time()

    def held(self) -> int:
        """How many outcomes this process holds in memory."""
        with self._cond:
            return len(self._done)

    def answer(self, key: str, model: str = "-") -> Any:
        """The solver's result for an item: made here or by any process, waited for, or solved now. The item's
        job is let go of afterwards (an item asks once; asked again, the board still has the outcome).

        Raises:
            ModelCallError: the solver's model call failed, or the session is stopping.
            SolverCrash: the solver itself raised.
        """
        with self._cond:
            self._waiting.add(key)
        try:
            return self._answer(key, model)
        finally:
            with self._cond:
                self._waiting.discard(key)
                self._done.pop(key, None)
            self.jobs.pop(key, None)

    def _answer(self, key: str, model: str) -> Any:
        pause = POLL_MIN_S
        job = self.jobs.get(key)
        while True:
            with self._cond:
                if key in self._done:
                    return _result(*self._done.pop(key))
                if key in self._running:  # a thread of this process is on it: wait for it, no polling
                    self._cond.wait(1.0)
                    continue
            row = self.board.read(key)
            if row is None:
                if job is None:
                    raise KeyError(key)
                return _result(*_outcome(job))  # not on the board: solve it here
            state, owner, lease, payload = row
            if state in ("done", "failed"):
                return _result(state, payload)
            if state == "planned":
                if self._served():  # the solving process will take it: no model is built in this process
                    time.sleep(pause)
                    pause = min(pause * 2, POLL_MAX_S)
                    continue
                if job is not None and self._claim(key):
                    return _result(*self._run(key, job))
                reason = self.board.stopped()
                if reason is not None:
                    raise ModelCallError(model, f"not called: the session is stopping ({reason})", kind="skipped")
                continue
            with self._cond:
                mine = key in self._running or key in self._done
            if owner == self.pid:
                stale = not mine
            else:
                stale = not alive(owner) or (lease is not None and lease < time.time())
            if stale and job is not None:  # its owner died or went silent past its lease: take it over and solve it here
                if self._claim(key, state="running", previous=owner):
                    return _result(*self._run(key, job))
                continue
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)


__all__ = ["Board", "SolverClient", "SolverCrash", "SolverPool", "alive", "fails_item"]
