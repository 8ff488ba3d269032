"""An env_broad_scale answer validated as the NMDC submission portal would take it: LinkML's own validator on the
nmdc-submission-schema slot of the answer's template, plus the value set that the slot's ``any_of`` leaves open.

Upstream's ``validate_via_linkml()`` is a stub (it returns None in every version), and the slot of each
environmental package is ``any_of: [<its enum>, string]`` with a ``label [ENVO:id]`` pattern, so LinkML alone
accepts any well-formed term: :meth:`SlotValidator.validate` checks the pattern with LinkML's JSON-schema
validator on the slot as the schema induces it for the template's class, then membership in the class's enum
where it has one. The schema (its package's JSON form) is read once per process, each template's slot induced
at its first use, and its LinkML validator built at the first value the pattern rejects.

The slot's only constraint on a string is its pattern, which LinkML's JSON-schema plugin checks with
``re.search``; a value the pattern matches is valid without the validator's call (some 150 us), and every
other value goes to LinkML. ``tests/test_ebs_information.py`` holds the shortcut to LinkML's own verdict.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from typing import Any

SLOT = "env_broad_scale"
ANSWER_CLASS = "EbsAnswer"


def class_of(template: str) -> str:
    """The submission schema's class of an environmental package: ``soil_data`` -> ``SoilInterface``.

    Example:
        >>> class_of("plant_associated_data")
        'PlantAssociatedInterface'
    """
    return "".join(part.capitalize() for part in template.removesuffix("_data").split("_")) + "Interface"


class SlotValidator:
    """``validate(value, template)``: ``(valid, message)`` of an answer for the template's env_broad_scale slot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[str, tuple[Any, frozenset[str] | None, str | None, re.Pattern | None]] = {}

    @functools.cached_property
    def _schema(self) -> dict[str, Any]:
        """The submission schema as its package ships it in JSON (some 40 ms to read; the YAML takes seconds)."""
        import json
        from importlib.resources import files

        return json.loads((files("nmdc_submission_schema") / "project" / "json" /
                           "nmdc_submission_schema.json").read_text(encoding="utf-8"))

    def _for(self, template: str) -> tuple[Any, frozenset[str] | None, str | None, re.Pattern | None]:
        """The template's slot: its LinkML validator (built at the first value the pattern rejects), its enum's
        values (None: none), the enum's name and the slot's pattern."""
        with self._lock:
            if template not in self._built:
                self._built[template] = self._induced(template)
            return self._built[template]

    def _induced(self, template: str) -> tuple[None, frozenset[str] | None, str | None, re.Pattern | None]:
        """The slot as the schema induces it for the template's class: the class's slot_usage over the slot."""
        schema = self._schema
        slot = {**schema["slots"][SLOT],
                **(schema["classes"].get(class_of(template), {}).get("slot_usage") or {}).get(SLOT, {})}
        enum_name = next((option.get("range") for option in slot.get("any_of") or ()
                          if option.get("range") in schema.get("enums", {})), None)
        values = frozenset(schema["enums"][enum_name].get("permissible_values") or ()) if enum_name else None
        pattern = slot.get("pattern")
        return None, values, enum_name, re.compile(pattern) if pattern else None

    def _linkml(self, template: str) -> Any:
        """LinkML's validator of the template's slot (its pattern, and any_of its enum or any string)."""
        from linkml.validator import Validator
        from linkml.validator.plugins import JsonschemaValidationPlugin

        with self._lock:
            validator, values, enum_name, pattern = self._built.get(template) or self._induced(template)
            if validator is not None:
                return validator
        definition: dict[str, Any] = {"range": "string", "required": True}
        if pattern is not None:
            definition["pattern"] = pattern.pattern
        schema: dict[str, Any] = {
            "id": "https://w3id.org/fieldeval/ebs-answer", "name": "ebs_answer",
            "prefixes": {"linkml": "https://w3id.org/linkml/"}, "imports": ["linkml:types"],
            "default_range": "string", "slots": {SLOT: definition},
            "classes": {ANSWER_CLASS: {"slots": [SLOT], "tree_root": True}}}
        if enum_name:  # the slot as the schema has it: any_of the enum or any string
            definition["any_of"] = [{"range": enum_name}, {"range": "string"}]
            schema["enums"] = {enum_name: {"permissible_values": {value: {} for value in values or ()}}}
        validator = Validator(schema, validation_plugins=[JsonschemaValidationPlugin(closed=True)])
        with self._lock:
            self._built[template] = (validator, values, enum_name, pattern)
        return validator

    def prepare(self, templates: Iterable[str]) -> None:
        """Read the schema and induce each template's slot now (before a caller freezes what lives long)."""
        for template in dict.fromkeys(templates):
            self._for(template)

    def validate(self, value: str, template: str) -> tuple[bool, str | None]:
        """Whether ``value`` (an answer, stripped) is valid for the template's slot, and if not, why, in one line."""
        return self._validate(value.strip(), template)

    @functools.lru_cache(maxsize=8192)  # answers repeat across items and models
    def _validate(self, value: str, template: str) -> tuple[bool, str | None]:
        validator, values, enum_name, pattern = self._for(template)
        problems = [] if pattern is not None and pattern.search(value) else self.linkml_problems(value, template)
        if problems:
            if all("does not match" in problem for problem in problems):
                return False, "not 'label [ENVO:id]' as the slot's pattern requires (one term, its 7-8 digit id)"
            return False, "; ".join(problems)[:300]
        if values is not None and value not in values:
            return False, f"not one of the {len(values)} values of {enum_name} (the slot's any_of lets any string by)"
        return True, None


    def linkml_problems(self, value: str, template: str) -> list[str]:
        """LinkML's own findings on ``value`` for the template's slot, each in one line (none: valid)."""
        return [" ".join(str(result.message).split())
                for result in self._linkml(template).validate({SLOT: value}, ANSWER_CLASS).results]


@functools.cache
def slot_validator() -> SlotValidator:
    """This process's validator (the schema is read once)."""
    return SlotValidator()


__all__ = ["SlotValidator", "class_of", "slot_validator"]
