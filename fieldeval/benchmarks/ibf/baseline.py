"""ibf-floor: a deliberately weak IBF responder, the floor any useful model must beat.

It reads only the prompt: it restates the alert, the location and the lead
time, then appends the same generic anticipatory actions and a generic
caveat for every hazard. It names no impacts, no districts and no numbers
of its own, and never sees the references.
"""

from __future__ import annotations

import re


from fieldeval.baselines import BaselineModel, registers

_LINE = re.compile(r"^(Context|Location|Forecast lead time):\s*(.+)$", re.M)

GENERIC_ACTIONS = (
    "disseminate early warning messages to communities",
    "pre-position relief supplies",
    "prepare evacuation plans and shelters",
)


def floor_response(prompt: str) -> str:
    """The floor's answer: the prompt's alert, place and lead time restated, then generic actions."""
    slots = {key: value.strip() for key, value in _LINE.findall(prompt)}
    alert = slots.get("Context", "A hazard alert has been issued.")
    place = slots.get("Location", "the affected area")
    lead = slots.get("Forecast lead time", "").split(".")[0]
    parts = [f"{alert.rstrip('.')}.", f"The area concerned is {place}."]
    if lead:
        parts.append(f"The lead time is {lead}.")
    parts.append("Recommended actions: " + "; ".join(GENERIC_ACTIONS) + ".")
    parts.append("Forecasts may change; follow official updates.")
    return " ".join(parts)


class IbfFloor(BaselineModel):
    """Offline IBF floor: restates hazard and place, adds generic actions; never the references."""

    model_id = "ibf-floor"
    respond = staticmethod(floor_response)


register_models = registers(IbfFloor)  # this module is an llm plugin
