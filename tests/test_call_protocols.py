"""The call engine's typed seams: a solver's client takes exactly the model client's options, and the
protocols stand apart from the concrete client."""

from __future__ import annotations

import inspect

from fieldeval.calls.client import ModelClient
from fieldeval.calls.pool import SolverClient
from fieldeval.calls.protocols import Client, Completer
from tests.test_import_graph import import_graph


def _parameters(function) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


def test_solver_client_complete_takes_exactly_model_client_complete_parameters():
    # a solver's client must accept what the session's client accepts, and nothing it would refuse
    assert _parameters(SolverClient.complete) == _parameters(ModelClient.complete)
    assert inspect.signature(SolverClient.complete).return_annotation == "Completion"


def test_the_protocols_complete_is_model_client_complete():
    for protocol in (Completer, Client):
        assert _parameters(protocol.complete) == _parameters(ModelClient.complete)
        assert inspect.signature(protocol.complete).return_annotation == "Completion"


def test_solver_client_passes_every_option_to_the_session_client():
    asked = []

    class Session:
        def complete(self, model_id, prompt, **options):
            asked.append((model_id, prompt, options))
            return "done"

    client = SolverClient(Session(), context="ctx")
    assert client.complete("m", "p", system="s", temperature=0.5, max_tokens=7, schema={"type": "object"}) == "done"
    client.complete("m", "q")
    assert asked == [("m", "p", {"system": "s", "temperature": 0.5, "max_tokens": 7, "schema": {"type": "object"}}),
                     ("m", "q", {"system": None, "temperature": 0.0, "max_tokens": None, "schema": None})]
    assert client.context == "ctx"


def test_the_protocols_import_no_concrete_client():
    graph = import_graph()
    seen, todo = set(), ["fieldeval.calls.protocols"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    assert not seen & {"fieldeval.calls.client", "fieldeval.calls.transport", "fieldeval.calls.models"}


def test_complete_many_asks_each_call_in_order_live_and_in_the_cost_plan():
    from fieldeval.run.plan import PlannedCost, RecordingClient

    asked = []

    class Session:
        def complete(self, model_id, prompt, **options):
            asked.append((model_id, prompt, options["system"]))
            return prompt.upper()

    calls = [{"model_id": "judge", "prompt": "a"}, {"model_id": "judge", "prompt": "b", "system": "s"}]
    assert SolverClient(Session(), context=None).complete_many(calls) == ["A", "B"]
    assert asked == [("judge", "a", None), ("judge", "b", "s")]
    entry = PlannedCost()
    RecordingClient(None, lambda model, tokens_in, tokens_out: 0.5, entry).complete_many(calls)
    assert (entry.calls, entry.cost, entry.models) == (2, 1.0, {"judge"})
