"""IBF prompts: what the model under test sees, and the judge's rubric prompt."""

from __future__ import annotations

import json

from fieldeval.benchmarks.ibf.corpus import IbfItem
from scorers.ibf import DIMENSIONS

SYSTEM_PROMPT = (
    "You are an impact-based forecasting adviser to humanitarian and disaster-management teams. "
    "Given a forecast alert, reason about the hazard, its likely impacts on people, agriculture and "
    "infrastructure, the forecast uncertainty, the anticipatory actions to take and the places affected "
    "(country, province or region, district). Answer in at most 250 words."
)

JUDGE_SYSTEM = (
    "You grade answers to impact-based forecasting questions. Score each of five dimensions as an integer "
    "from 0 to 4 and reply with one JSON object only."
)

RUBRIC = """Dimensions:
1 hazard_recognition: does the response correctly identify the meteorological or hydrological hazard type?
2 impact_reasoning: does it link the hazard to plausible societal, agricultural or infrastructure impacts?
3 uncertainty_handling: does it acknowledge forecast uncertainty appropriately rather than overstating confidence?
4 action_relevance: does it suggest anticipatory actions consistent with the hazard context?
5 geographic_specificity: does it ground its reasoning in the stated region, country or administrative level?

Scale (each dimension):
4 Excellent: fully correct, specific and contextually appropriate
3 Good: correct with minor omissions or imprecision
2 Partial: partially correct; key elements missing or confused
1 Poor: mostly incorrect but shows marginal relevant content
0 Absent: no relevant content, refusal, or hallucinated response"""

def render_prompt(item: IbfItem) -> str:
    """The prompt a model under test sees: the forecast context and the question, never the references."""
    c = item.context
    return (f"Context: {c.alert}\nLocation: {c.location}\nForecast lead time: {c.lead_time}. {c.magnitude}\n\n"
            f"Question: {item.question}")


def judge_prompt(item: IbfItem, response: str) -> str:
    """The judge's prompt: rubric, item, reference notes and the response to grade."""
    refs = json.dumps(item.references.model_dump(), indent=2, ensure_ascii=False)
    keys = ", ".join(f'"{d}": <0-4>' for d in DIMENSIONS)
    return (f"{RUBRIC}\n\nForecasting task:\n{render_prompt(item)}\n\nReference notes (what a strong answer "
            f"covers):\n{refs}\n\nResponse to grade:\n<<<\n{response}\n>>>\n\n"
            f'Reply with JSON only: {{{keys}, "rationale": "<one sentence>"}}')
