"""The shared shape of an offline baseline: an llm model that answers from the prompt alone, and its llm plugin hook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import llm
from pydantic import Field


class BaselineModel(llm.Model):
    """An offline llm model whose answer is ``respond(prompt)``: subclasses set ``model_id`` and ``respond``."""

    can_stream = False
    in_process: ClassVar[bool] = True  # answered in the calling thread: it computes, never waits (ModelClient)
    respond: ClassVar[Callable[[str], str]]

    class Options(llm.Options):
        temperature: float | None = Field(default=None, description="Accepted for uniformity; baselines are deterministic")
        max_tokens: int | None = Field(default=None, description="Accepted for uniformity; ignored")

    def answer(self, prompt: str, system: str | None) -> str:
        """The baseline's response to one prompt (the system prompt is not read)."""
        return type(self).respond(prompt)

    def execute(self, prompt, stream, response, conversation):
        """Answer the prompt text (the llm plugin entry point)."""
        yield self.answer(prompt.prompt or "", prompt.system)


def registers(*models: type[BaselineModel]) -> Callable[[Any], None]:
    """llm's ``register_models`` hook registering one of each of ``models``; a baseline module that assigns it to
    ``register_models`` is an llm plugin."""

    @llm.hookimpl
    def register_models(register: Any) -> None:
        for model in models:
            register(model())

    return register_models


__all__ = ["BaselineModel", "registers"]
