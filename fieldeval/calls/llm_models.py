"""fieldeval's llm plugin for endpoints registered with ``fieldeval models add``.

Each benchmark's offline baseline is an llm plugin of its own
(``fieldeval/benchmarks/<name>/baseline.py``); this one turns the store's
registered endpoints into OpenAI-compatible llm models.
"""

from __future__ import annotations

import llm

from fieldeval.calls.endpoints import register_endpoints


@llm.hookimpl
def register_models(register) -> None:
    """Register every endpoint of the run store as an llm model."""
    register_endpoints(register)
