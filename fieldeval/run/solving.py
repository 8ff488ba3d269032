"""The eval items' solvers in the session's bounded pool (:mod:`fieldeval.calls.pool`), and the plan a
``--collect-only`` of a designed run prints instead."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fieldeval.defaults import MARKER
from fieldeval.run.markers import eval_marker

if TYPE_CHECKING:
    from fieldeval.calls.batches.rounds import BatchSettings
    from fieldeval.calls.client import ModelClient
    from fieldeval.calls.pool import SolverPool
    from fieldeval.calls.protocols import Solver
    from fieldeval.run.selection import Selection


class SolverJobs(Mapping[str, Callable[[], Any]]):
    """Node id -> the solver call of that eval item, made when the pool asks for it: the mapping holds the items
    (which the session holds anyway until they have run), not a call each. The pool removes an item once taken
    (:meth:`pop`)."""

    def __init__(self, items: dict[str, pytest.Item], cases_of: Callable[[str], Any], clients: dict[str, Any]) -> None:
        self._items = items
        self._cases_of = cases_of
        self._clients = clients

    def __getitem__(self, key: str) -> Callable[[], Any]:
        return functools.partial(self._solve, self._items[key])  # its marker is read when it runs, not here

    def _solve(self, item: pytest.Item) -> Any:
        _, name, solver, callspec = next(solver_items([item]))
        return solve_at(solver, self._cases_of(name), callspec.params["case"], callspec.params["model"],
                        self._clients[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def pop(self, key: str, *default: Any) -> Any:
        """Let go of an item's entry (the pool took its call); its call, else ``default``."""
        if key not in self._items:
            if default:
                return default[0]
            raise KeyError(key)
        job = self[key]
        del self._items[key]
        return job


def solve_at(solver: Solver, cases: Any, position: Any, model: str, client: Any) -> Any:
    """Run ``solver`` on the case at ``position`` (read when the solver runs, not when it is planned)."""
    case = cases[position] if isinstance(position, int) and not isinstance(position, bool) else position
    return solver(case, model, client)


def solver_items(items: Sequence[pytest.Item]) -> Iterator[tuple[pytest.Item, str, Solver, Any]]:
    """(item, benchmark, solver, callspec) of every eval item whose module declares a solver."""
    for item in items:
        marker = eval_marker(item)
        solver = marker.kwargs.get("solver") if marker is not None else None
        callspec = getattr(item, "callspec", None)
        if solver is None or callspec is None or "case" not in callspec.params or "model" not in callspec.params:
            continue
        yield item, marker.kwargs["benchmark"], solver, callspec


def batch_settings(options: Any) -> BatchSettings | None:
    """``--batch``'s settings, or None without it."""
    if not options.batch:
        return None
    from fieldeval.calls.batches.rounds import BatchSettings

    return BatchSettings(max_wait_s=options.batch_max_wait, size=options.batch_size)


class Solving:
    """This process's solver threads: planned on the session's board at collection, waited for by each item.

    With ``--batch`` the solving process first sends the items' uncached calls as provider batches
    (:mod:`fieldeval.calls.batches.rounds`), serving the board meanwhile; the threads then find them answered.
    """

    def __init__(self, client: ModelClient, selection: Selection, *, batch: BatchSettings | None = None) -> None:
        self.client = client
        self.selection = selection
        self.batch = batch
        self.pool: SolverPool | None = None

    def start(self, items: Sequence[pytest.Item], *, maxfail: int, start: bool) -> None:
        """Plan every eval item whose module declares a solver on the board, and with ``start`` start this
        process's share of the solver threads."""
        from fieldeval.calls.pool import Board, SolverClient, SolverPool

        clients: dict[str, SolverClient] = {}
        planned: dict[str, pytest.Item] = {}
        for item, name, _solver, _callspec in solver_items(items):
            if name not in clients:
                clients[name] = SolverClient(self.client, self.selection.context(name))
            planned[item.nodeid] = item
        jobs = SolverJobs(planned, self.selection.cases, clients)
        if not jobs:
            return
        board = self.client.board
        if board is None:  # no session folder (an eval module outside the selected ones): this process alone
            board = Board(Path(tempfile.mkdtemp(prefix="fieldeval-board-")) / "board.sqlite")
        self.pool = SolverPool(board, jobs, self.client.limits.local_concurrency(), maxfail=maxfail)
        if start:
            batches = None
            if self.batch is not None and self.pool.solving:
                batches = functools.partial(self._run_batches, items)
            self.pool.start(before_threads=batches)

    def _run_batches(self, items: Sequence[pytest.Item]) -> None:
        """``--batch``: the rounds, before any solver runs live; their answers are the client's."""
        from fieldeval.calls.batches.rounds import run_batches

        jobs = []
        for _item, name, solver, callspec in solver_items(items):
            solve = functools.partial(solve_at, solver, self.selection.cases(name), callspec.params["case"],
                                      callspec.params["model"])
            jobs.append((solve, self.selection.context(name)))
        self.client.batch_answers = run_batches(jobs, self.client, self.batch)

    def plan_lines(self, items: Sequence[pytest.Item]) -> list[str]:
        """``--collect-only`` of a matrix or repeated run: calls, estimated tokens and cost per combination
        (:mod:`fieldeval.run.plan`); nothing is sent."""
        from fieldeval.run.plan import plan_costs, plan_lines

        jobs = []
        for _item, name, solver, callspec in solver_items(items):
            model = callspec.params["model"]
            solve = functools.partial(solve_at, solver, self.selection.cases(name), callspec.params["case"], model)
            jobs.append((name, str(model), solve, self.selection.context(name)))
        return plan_lines(plan_costs(jobs, self.client.estimate_cost))

    def answer(self, item: pytest.Item) -> Any:
        """The result of the item's solver (waited for, or solved now)."""
        model = item.callspec.params.get("model", "-") if hasattr(item, "callspec") else "-"
        if self.pool is None:
            raise pytest.UsageError(f"{item.nodeid}: the answer fixture needs a solver in "
                                    f"@pytest.mark.{MARKER}(benchmark=..., solver=...)")
        return self.pool.answer(item.nodeid, model)

    def drain(self) -> None:
        """In the solving process: stay until every planned row is solved, for the workers still scoring."""
        if self.pool is not None:
            self.pool.drain()

    def stop(self, reason: str | None = None) -> None:
        """No new model call starts, in any process of the session; calls in flight end on their own timeout."""
        if reason is not None:
            self.client.stop(reason)
        if self.pool is not None:
            self.pool.stop(reason) if reason is not None else self.pool.stop()
        elif reason is not None and self.client.board is not None:
            try:
                self.client.board.stop(reason)
            except Exception:  # noqa: BLE001 - the session folder is already gone
                pass


__all__ = ["SolverJobs", "Solving", "batch_settings", "solve_at", "solver_items"]
