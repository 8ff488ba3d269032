"""The call engine's typed seams: a solver's client takes exactly the model client's options, and the
protocols stand apart from the concrete client."""

from __future__ import annotations

import inspect

from fieldeval.calls.client import ModelClient
from fieldeval.calls.protocols import Client, Completer
from tests.test_import_graph import import_graph


def _parameters(function) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


def test_the_protocols_complete_is_model_client_complete():
    for protocol in (Completer, Client):
        assert _parameters(protocol.complete) == _parameters(ModelClient.complete)
        assert inspect.signature(protocol.complete).return_annotation == "Completion"


def test_the_protocols_import_no_concrete_client():
    graph = import_graph()
    seen, todo = set(), ["fieldeval.calls.protocols"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    assert not seen & {"fieldeval.calls.client", "fieldeval.calls.transport", "fieldeval.calls.models"}
