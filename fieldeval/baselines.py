"""The shared shape of an offline baseline: an llm model that answers from the prompt alone."""

from __future__ import annotations

from abc import abstractmethod

import llm
from pydantic import Field


class BaselineModel(llm.Model):
    """An offline llm model; subclasses implement :meth:`answer`."""

    can_stream = False

    class Options(llm.Options):
        temperature: float | None = Field(default=None, description="Accepted for uniformity; baselines are deterministic")
        max_tokens: int | None = Field(default=None, description="Accepted for uniformity; ignored")

    @abstractmethod
    def answer(self, prompt: str, system: str | None) -> str:
        """The baseline's response to one prompt."""

    def execute(self, prompt, stream, response, conversation):
        """Answer the prompt text (the llm plugin entry point)."""
        yield self.answer(prompt.prompt or "", prompt.system)
