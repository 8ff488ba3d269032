"""An env_broad_scale answer validated as the NMDC submission portal would take it: LinkML's own validator on the
nmdc-submission-schema slot of the answer's template, plus the value set that the slot's ``any_of`` leaves open.

Upstream's ``validate_via_linkml()`` is a stub (it returns None in every version), and the slot of each
environmental package is ``any_of: [<its enum>, string]`` with a ``label [ENVO:id]`` pattern, so LinkML alone
accepts any well-formed term: :meth:`SlotValidator.validate` checks the pattern with LinkML's JSON-schema
validator on the slot as the schema induces it for the template's class, then membership in the class's enum
where it has one. The schema is read once per process, and each template's validator built at its first use.

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
    def _view(self) -> Any:
        from importlib.resources import files

        from linkml_runtime.utils.schemaview import SchemaView

        return SchemaView(str(files("nmdc_submission_schema") / "schema" / "nmdc_submission_schema.yaml"))

    def _for(self, template: str) -> tuple[Any, frozenset[str] | None, str | None, re.Pattern | None]:
        """The template's LinkML validator, its enum's values (None: none), the enum's name and the slot's pattern."""
        with self._lock:
            if template not in self._built:
                self._built[template] = self._build(template)
            return self._built[template]

    def _build(self, template: str) -> tuple[Any, frozenset[str] | None, str | None, re.Pattern | None]:
        from linkml.validator import Validator
        from linkml.validator.plugins import JsonschemaValidationPlugin

        view = self._view
        owner = class_of(template)
        slot = view.induced_slot(SLOT, owner) if owner in view.all_classes() else view.get_slot(SLOT)
        enums = view.all_enums()
        enum_name = next((option.range for option in slot.any_of or () if option.range in enums), None)
        values = frozenset(view.get_enum(enum_name).permissible_values) if enum_name else None
        definition: dict[str, Any] = {"range": "string", "required": True}
        if slot.pattern:
            definition["pattern"] = slot.pattern
        schema: dict[str, Any] = {
            "id": "https://w3id.org/fieldeval/ebs-answer", "name": "ebs_answer",
            "prefixes": {"linkml": "https://w3id.org/linkml/"}, "imports": ["linkml:types"],
            "default_range": "string", "slots": {SLOT: definition},
            "classes": {ANSWER_CLASS: {"slots": [SLOT], "tree_root": True}}}
        if enum_name:  # the slot as the schema has it: any_of the enum or any string
            definition["any_of"] = [{"range": enum_name}, {"range": "string"}]
            schema["enums"] = {enum_name: {"permissible_values": {value: {} for value in values}}}
        validator = Validator(schema, validation_plugins=[JsonschemaValidationPlugin(closed=True)])
        validator.validate({SLOT: ""}, ANSWER_CLASS)  # its JSON schema is generated at the first call: now
        return validator, values, enum_name, re.compile(slot.pattern) if slot.pattern else None

    def prepare(self, templates: Iterable[str]) -> None:
        """Read the schema and build each template's validator now (before a caller freezes what lives long)."""
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
        validator = self._for(template)[0]
        return [" ".join(str(result.message).split())
                for result in validator.validate({SLOT: value}, ANSWER_CLASS).results]


@functools.cache
def slot_validator() -> SlotValidator:
    """This process's validator (the schema is read once)."""
    return SlotValidator()


__all__ = ["SlotValidator", "class_of", "slot_validator"]
