"""arith-baseline: an offline llm model that adds the two numbers of the prompt, except when one is 7."""

from __future__ import annotations

import re

import llm


class ArithBaseline(llm.Model):
    model_id = "arith-baseline"
    can_stream = False

    def execute(self, prompt, stream, response, conversation):
        a, b = (int(n) for n in re.findall(r"\d+", prompt.prompt)[:2])
        yield str(a + b + (1 if a == 7 else 0))  # one deliberate mistake, so accuracy is not 1


@llm.hookimpl
def register_models(register) -> None:
    register(ArithBaseline())
