"""fieldeval: pytest-native evaluation of language models on field-science tasks."""

from __future__ import annotations

from fieldeval.errors import UsageError
from fieldeval.models import Completion, ModelCallError, complete, completion_fields

__all__ = ["Completion", "ModelCallError", "UsageError", "complete", "completion_fields"]
