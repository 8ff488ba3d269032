"""Offline baselines and registered endpoints, given to llm like any third-party plugin.

``llm -m ebs-baseline "..."`` works once fieldeval is installed. Each
baseline sees only the prompt it is given, never the answer.
"""

from __future__ import annotations

import llm

from fieldeval.baselines.base import BaselineModel
from fieldeval.endpoints import register_endpoints
from fieldeval.baselines.ebs import EbsBaseline
from fieldeval.baselines.ibf import IbfFloor
from fieldeval.baselines.microbiorel import MicrobioRelBaseline

BASELINES: list[type[BaselineModel]] = [EbsBaseline, IbfFloor, MicrobioRelBaseline]


@llm.hookimpl
def register_models(register) -> None:
    """Register every offline baseline."""
    for cls in BASELINES:
        register(cls())
    register_endpoints(register)
