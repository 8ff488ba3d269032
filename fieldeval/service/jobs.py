"""The service's job records and the runner that executes each job as a pytest subprocess.

A job is one ``POST /api/evaluations``: it waits in a queue, runs
``python -m pytest evals/test_<bench>.py ...`` (the same engine as the command
line, which stores the run under the job's run id), and ends ``completed``
(pytest exit 0 or 1: a gate may fail, the run is stored) or ``failed`` (any
other exit, stderr tail kept). The records live in the ``service_jobs`` table,
which the service creates on the store's own database.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

ACTIVE = ("queued", "running")
STDERR_TAIL_CHARS = 4000
POLL_S = 0.5

metadata = sa.MetaData()
service_jobs = sa.Table(
    "service_jobs", metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("benchmark", sa.String(64), nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("model_id", sa.String(64)),
    sa.Column("corpus_version", sa.Text),
    sa.Column("label", sa.Text),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("total", sa.Integer),
    sa.Column("done", sa.Integer, nullable=False, default=0),
    sa.Column("errors", sa.Integer, nullable=False, default=0),
    sa.Column("options", sa.JSON, nullable=False, default=dict),
    sa.Column("created_at", sa.String(32), nullable=False),
    sa.Column("started_at", sa.String(32)),
    sa.Column("finished_at", sa.String(32)),
    sa.Column("pid", sa.Integer),
    sa.Column("returncode", sa.Integer),
    sa.Column("command", sa.JSON),
    sa.Column("stderr_tail", sa.Text),
)


def now_iso() -> str:
    """``2026-05-29T08:14:03Z``."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Job:
    """One evaluation started over HTTP.

    Attributes:
        run_id: the id the stored run will have, ``run_`` and 8 hex digits.
        benchmark: ``ibf``, ``ebs`` or ``microbiorel``.
        model: the ``--model`` id passed to pytest.
        model_id: the registered model's id, when it was started with one.
        corpus_version: the corpus tag (IBF), else None.
        label: the human-readable run tag.
        status: ``queued``, ``running``, ``completed``, ``failed`` or ``interrupted``.
        total: items planned; done, errors: items finished and errored so far.
        options: the request's generation options (temperature, max_tokens, batch_size).
        created_at, started_at, finished_at: ISO 8601 UTC times.
        pid: the pytest process while it runs.
        returncode: pytest's exit status.
        command: the pytest command line (store password hidden).
        stderr_tail: the end of pytest's stderr for a failed job.
    """

    run_id: str
    benchmark: str
    model: str
    model_id: str | None
    corpus_version: str | None
    label: str | None
    status: str
    total: int | None
    done: int
    errors: int
    options: dict[str, Any]
    created_at: str
    started_at: str | None
    finished_at: str | None
    pid: int | None
    returncode: int | None
    command: list[str] | None
    stderr_tail: str | None

    def as_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return asdict(self)


class JobTable:
    """The ``service_jobs`` table on the store's engine."""

    def __init__(self, engine: Engine) -> None:
        from fieldeval.store.url import database_errors

        self.engine = engine
        with database_errors(engine.url.render_as_string(hide_password=True)):  # a read-only role: one line
            metadata.create_all(engine, checkfirst=True)

    def add(self, **values: Any) -> Job:
        """Insert a queued job."""
        values.setdefault("status", "queued")
        values.setdefault("created_at", now_iso())
        values.setdefault("done", 0)
        values.setdefault("errors", 0)
        with self.engine.begin() as conn:
            conn.execute(service_jobs.insert().values(**values))
        job = self.get(values["run_id"])
        assert job is not None, "a committed job must be readable"
        return job

    def update(self, run_id: str, **values: Any) -> None:
        """Change some columns of a job."""
        with self.engine.begin() as conn:
            conn.execute(service_jobs.update().where(service_jobs.c.run_id == run_id).values(**values))

    def get(self, run_id: str) -> Job | None:
        """The job, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(service_jobs).where(service_jobs.c.run_id == run_id)).first()
        return None if row is None else Job(**row._asdict())

    def list(self, statuses: tuple[str, ...] | None = None) -> list[Job]:
        """Jobs, oldest first, optionally only those in ``statuses``."""
        query = sa.select(service_jobs).order_by(service_jobs.c.created_at, service_jobs.c.run_id)
        if statuses:
            query = query.where(service_jobs.c.status.in_(statuses))
        with self.engine.connect() as conn:
            return [Job(**row._asdict()) for row in conn.execute(query)]

    def delete(self, run_id: str) -> bool:
        """Forget a finished job; True when there was one."""
        with self.engine.begin() as conn:
            return conn.execute(service_jobs.delete().where(service_jobs.c.run_id == run_id)).rowcount > 0

    def interrupt_active(self) -> list[str]:
        """Mark jobs left queued or running by a previous server as interrupted; returns their ids."""
        ids = [job.run_id for job in self.list(ACTIVE)]
        for run_id in ids:
            self.update(run_id, status="interrupted", finished_at=now_iso(), pid=None)
        return ids


PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 10.0
CHILD_ENV_DROPPED = ("FIELDEVAL_API_TOKEN",)  # the job needs no service secret


def _die_with_parent(parent_pid: int):
    """The child's pre-exec step: SIGKILL when the server thread that started it dies (Linux's
    ``PR_SET_PDEATHSIG``), so a crashed or ``kill -9``-ed server leaves no run making model calls;
    a server already gone before the flag was set kills the child at once."""

    def step() -> None:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # not Linux: the parent-liveness check below still applies once
            pass
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return step


SERVICE_FIELDS = ("corpus_version", "temperature", "max_tokens")  # the body fields a benchmark may take as options


def job_flags(job: Job) -> list[str]:
    """The benchmark's own flags for the job's corpus version, temperature and max tokens: each where the
    benchmark's options declare a field of that name (e.g. IBF's ``--ibf-temperature``), found through its face."""
    from fieldeval.benchmark import get_benchmark

    values = {"corpus_version": job.corpus_version, **(job.options or {})}
    flags = []
    for f in get_benchmark(job.benchmark).option_fields():
        if f.name in SERVICE_FIELDS and values.get(f.name) is not None:
            flags.append(f"{f.metadata['flag']}={values[f.name]}")
    return flags


class Runner:
    """Runs queued jobs one at a time in a worker thread and keeps their records current."""

    def __init__(self, table: JobTable, *, store_url: str, evals_dir: Path, work_dir: Path | None = None) -> None:
        self.table = table
        self.store_url = store_url
        self.evals_dir = evals_dir
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="fieldeval-service-"))
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._proc: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._work, name="fieldeval-jobs", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    def submit(self, run_id: str) -> None:
        """Queue a job that is in the table."""
        self._queue.put(run_id)

    def stop(self) -> None:
        """Stop the worker: the running pytest is terminated and its job marked interrupted."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()  # the run saves itself as interrupted, or is killed after the grace period
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._queue.put(None)
        self._thread.join(timeout=15)
        self.table.interrupt_active()

    def command(self, job: Job, progress: Path, store_url: str) -> list[str]:
        """The pytest command line of a job; every value rides as ``--opt=value``, so none can pass for an option."""
        cmd = [sys.executable, "-m", "pytest", str(self.evals_dir / f"test_{job.benchmark}.py"),
               f"--model={job.model}", f"--run-id={job.run_id}", f"--progress-file={progress}",
               f"--store={store_url}", "-p", "no:cacheprovider", "-q",
               f"--reports-dir={progress.parent / 'reports'}",
               f"--eval-report={progress.parent / 'reports' / 'report.json'}"]
        if job.label:
            cmd.append(f"--run-label={job.label}")
        if (job.options or {}).get("batch_size"):  # the seed's batch_size: concurrent inference requests
            cmd.append(f"--concurrency={int(job.options['batch_size'])}")
        return cmd + job_flags(job)

    def _work(self) -> None:
        while not self._stopping.is_set():
            run_id = self._queue.get()
            if run_id is None:
                return
            job = self.table.get(run_id)
            if job is None or job.status != "queued":  # deleted or finished while it waited
                continue
            try:
                self._run(job)
            except Exception as error:  # a job must end in a state, whatever went wrong
                self.table.update(run_id, status="failed", finished_at=now_iso(), pid=None,
                                  stderr_tail=f"the service could not run the job: {error!r}")

    def _run(self, job: Job) -> None:
        folder = self.work_dir / job.run_id
        folder.mkdir(parents=True, exist_ok=True)
        progress = folder / "progress.json"
        from fieldeval.store import redact

        cmd = self.command(job, progress, self.store_url)
        env = {**{k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROPPED}, "FIELDEVAL_STORE": self.store_url}
        with open(folder / "stderr.txt", "w+b") as stderr, open(folder / "stdout.txt", "wb") as stdout:
            self._proc = proc = subprocess.Popen(cmd, cwd=self.evals_dir.parent, env=env, stdout=stdout, stderr=stderr,
                                                 stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent(os.getpid()))
            store_flag = f"--store={self.store_url}"
            shown = [f"--store={redact(self.store_url)}" if part == store_flag else part for part in cmd]
            self.table.update(job.run_id, status="running", started_at=now_iso(), pid=proc.pid, command=shown)
            seen = None
            while True:
                try:
                    returncode = proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    seen = self._read_progress(job.run_id, progress, seen)
            self._read_progress(job.run_id, progress, seen)
            self._proc = None
            if self._stopping.is_set():
                return
            stderr.seek(0)
            tail = stderr.read().decode("utf-8", "replace")[-STDERR_TAIL_CHARS:]
        if returncode not in (0, 1):
            stdout_text = (folder / "stdout.txt").read_text("utf-8", "replace")
            tail = (tail + "\n" + stdout_text[-STDERR_TAIL_CHARS:]).strip()[-STDERR_TAIL_CHARS:]
        self.table.update(job.run_id, status="completed" if returncode in (0, 1) else "failed", finished_at=now_iso(),
                          pid=None, returncode=returncode, stderr_tail=tail or None)
        if returncode in (0, 1):  # stored; otherwise a run the store could not take stays for `fieldeval runs push`
            shutil.rmtree(folder / "reports", ignore_errors=True)

    def _read_progress(self, run_id: str, path: Path, seen: Any) -> Any:
        """Copy the progress file's counts into the job when it changed; returns what was read."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return seen
        if data == seen or not isinstance(data, dict):
            return seen
        values = {key: int(data[key]) for key in ("total", "done", "errors") if isinstance(data.get(key), int)}
        if values.get("total") == 0:
            values.pop("total")  # nothing collected yet: keep the planned count
        if values:
            self.table.update(run_id, **values)
        return data
