"""The end of an eval session (controller), in order, from the last item to the exit status.

:func:`begin` runs before the other plugins' ``pytest_sessionfinish`` (pytest-json-report builds its report there):

1. SIGINT and SIGTERM wait from here until the run is saved (:meth:`~fieldeval.run.signals.Interrupts.shield`);
2. the store's stage writes its last chunk and the store's thread starts copying it;
3. the rows are parsed (a large session then frees the heap and freezes what is left), the status is fixed and
   the report built;
4. the exit status is decided, once (:func:`~fieldeval.run.report.exit_status`).

:meth:`Ending.end` runs after them:

5. the rows file, then the run kept beside it, then the store's commit in its thread while the report, the
   tables and the Markdown summary are written (:func:`save_files`);
6. the run's ``status.json`` says how it ended (``kept`` while it waits for ``runs push``);
7. a run that could not be saved whole ends the session with one line and exit status 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from fieldeval.run import memory
from fieldeval.run.report import SAVE_FAILED, exit_status

if TYPE_CHECKING:
    from fieldeval.run.runfiles import RunFiles
    from fieldeval.run.session import EvalSession
    from fieldeval.run.signals import Interrupts

FREEZE_ABOVE_ITEMS = 1_000  # sessions this large freeze the collected objects (gc.freeze) and what is left at exit


@dataclass
class Ending:
    """A session between :func:`begin` and :meth:`end`; ``allowed``: its failures were errored items that
    ``--max-errors`` allows, so it passes."""

    session: pytest.Session
    state: EvalSession
    files: RunFiles
    allowed: bool

    def end(self) -> None:
        """Steps 5-7: save the run and its files; a run not saved whole sets exit status 2 with its one line."""
        session, state = self.session, self.state
        if self.allowed:  # again: a plugin's sessionfinish may have ORed pytest's own status back in
            session.exitstatus = pytest.ExitCode.OK
        try:
            problem = save_files(session.config, state, self.files, int(session.exitstatus))
        finally:
            state.saver.abandon()  # a run not handed over by now never will be: the store's thread ends
        lines = list(dict.fromkeys(p for p in (state.disk_full, problem) if p))
        if lines:  # one line, whatever went wrong
            sys.stderr.write("; ".join([lines[0], *(line.removeprefix("fieldeval: ") for line in lines[1:])]) + "\n")
            sys.stderr.flush()
            session.exitstatus = SAVE_FAILED


def begin(session: pytest.Session, state: EvalSession, files: RunFiles, interrupts: Interrupts) -> Ending:
    """Steps 1-4: close the run's rows, build its report and decide the exit status (set on ``session``)."""
    interrupts.shield()
    pytest_status = session.exitstatus
    if interrupts.received and pytest_status == pytest.ExitCode.OK:  # a repeated signal cut pytest's own handling
        pytest_status = pytest.ExitCode.INTERRUPTED
    state.saver.flush_stage()  # the last chunk of store rows, before the rows are parsed (memory at its most)
    state.begin_store()  # the staged responses go into the store while the rows are parsed and aggregated
    try:
        if state.eval_items >= FREEZE_ABOVE_ITEMS:
            memory.trim_heap()  # the finished items' free memory back to the system before the rows come in
            state.intake.rows()  # parsed once, then frozen: no collection walks them while the run is saved
            memory.freeze()
        state.finish(pytest_status)
        memory.drop_idle_hypothesis_plugin(session.config, only_evals=_only_evals(session, state))
        payload = state.payload()
    except BaseException:
        state.saver.abandon()
        raise
    errored_only = session.testsfailed <= sum(state.intake.errors.values())  # only errored eval items failed
    status = exit_status(pytest_status, payload, errors_allowed=state.errors_allowed(), errored_only=errored_only,
                         disk_full=state.disk_full is not None)
    session.exitstatus = status
    return Ending(session, state, files, allowed=status == pytest.ExitCode.OK != pytest_status)


def _only_evals(session: pytest.Session, state: EvalSession) -> bool:
    """Whether the session's collected items were eval items only."""
    evals = state.eval_items if state.is_worker else sum(state.progress.planned.values())
    return bool(session.testscollected) and evals >= session.testscollected


def end_worker(session: pytest.Session, state: EvalSession) -> None:
    """An xdist worker's end: the solving worker serves the others until every row is solved; each prints its own
    (empty) terminal summary too, without Hypothesis's plugin where idle."""
    state.solving.drain()
    memory.drop_idle_hypothesis_plugin(session.config, only_evals=_only_evals(session, state))


def save_files(config: pytest.Config, state: EvalSession, files: RunFiles, exitstatus: int) -> str | None:
    """The run's rows file, report and tables under its folder, published to reports/, the Markdown summary, and
    the store; None when all went well, else the one line to end with (the disk filled up: every file is written
    whole or not at all; or the store refused the run: it is kept for ``fieldeval runs push``)."""
    from fieldeval.run.runfiles import trim_report
    from fieldeval.run.writable import full_disk_line, out_of_space

    if state.disk_full is not None:
        exitstatus = SAVE_FAILED
    problem = None
    saving, unsaved, rows = None, None, None
    try:
        rows = files.write_rows(state.intake.row_lines())
    except OSError as error:
        if not out_of_space(error):
            raise
        problem = full_disk_line("the rows file", error)
    results = state.intake.has_results()
    if results:
        try:
            saving = state.save(exitstatus, files.folder, files.rows_sha256 if rows is not None else None)
        except Exception as error:  # noqa: BLE001  (raised again once the files are written: they come first)
            unsaved = error
    try:
        if state.store_url() is not None and results:
            files.mark("saving", run_status=state.status, started_at=state.started_at, exitcode=exitstatus)
        if rows is not None:
            tables = state.write_outputs(files.folder)
            report = memory.json_report(config)
            if report is not None:
                report["exitcode"] = exitstatus
                report["evals_rows"] = files.rows_pointer(rows, sum(len(r) for r in state.intake.rows().values()))
                trim_report(report, state.eval_items, state.released_entries)
                files.write_report(report, indent=config.option.json_report_indent)
            files.publish(tables)
        summary_md = state.summary_md()
        if summary_md and results:
            from fieldeval.run.summary import render_markdown

            with open(summary_md, "a", encoding="utf-8") as handle:
                handle.write(render_markdown(state.payload()))
    except OSError as error:
        if not out_of_space(error):
            raise
        problem = problem or full_disk_line("the report and tables", error)
    finally:
        stored = saving.result() if saving is not None else None  # waited for, whatever the files did
    kept = state.saver.kept_file()
    try:  # the run's status once the store has committed it; "kept" while it waits in unstored.json for runs push
        fields = {"run_status": state.status, "kept": str(kept)} if kept is not None else {}
        files.mark("kept" if kept is not None else state.status, started_at=state.started_at, exitcode=exitstatus,
                   **fields)
    except OSError as error:
        if not out_of_space(error):
            raise
        problem = problem or full_disk_line("status.json", error)
    if unsaved is not None:
        raise unsaved
    if state.eval_items >= FREEZE_ABOVE_ITEMS:
        memory.freeze()  # what the run built stays for the exit: no collection need walk it again
    return stored or problem


__all__ = ["FREEZE_ABOVE_ITEMS", "SAVE_FAILED", "Ending", "begin", "end_worker", "save_files"]
