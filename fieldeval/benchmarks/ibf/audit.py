"""The audit of an IBF corpus: items per hazard, duplicate questions, and items without a reference."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING

from fieldeval.benchmark import Finding
from fieldeval.benchmarks.findings import thin_groups
from fieldeval.benchmarks.ibf.corpus import IbfItem
from fieldeval.benchmarks.ibf.prompts import render_prompt
from scorers.ibf_reference import phrase_matches

if TYPE_CHECKING:
    from fieldeval.benchmarks.ibf import IbfContext

MIN_HAZARD_ITEMS = 5  # a hazard is a cluster: fewer items than this and its per-hazard numbers are noise


def _matchable(phrase: str) -> bool:
    """Whether the reference scorer can ever match the phrase (it has a word that is not a stop word)."""
    words = re.findall(r"[a-z0-9]+", phrase.lower().replace("³", "3"))
    return phrase_matches(phrase, {w[:k] for w in words for k in range(1, len(w) + 1)})


def unreferenced_notes(item: IbfItem) -> list[str]:
    """The item's reference-note fields none of whose phrases the reference scorer can match."""
    refs = item.references
    fields = {
        "hazard.indicators": refs.hazard.indicators,
        "impacts.societal": refs.impacts.societal,
        "impacts.agricultural": refs.impacts.agricultural,
        "impacts.infrastructure": refs.impacts.infrastructure,
        "uncertainties": refs.uncertainties,
        "actions": refs.actions,
        "geography": [refs.geography.country, *refs.geography.admin1, *refs.geography.admin2],
    }
    return [name for name, phrases in fields.items() if not any(map(_matchable, phrases))]


def audit(context: IbfContext) -> list[Finding]:
    """The corpus's findings: hazards with few items, items whose prompts are the same, items without a reference."""
    items = context.corpus.items
    findings = []
    thin = thin_groups([(item.id, item.hazard) for item in items], MIN_HAZARD_ITEMS)
    if thin:
        findings.append(Finding(
            "hazard_with_few_items",
            f"{len(thin.counts)} of {thin.groups} hazards have fewer than {MIN_HAZARD_ITEMS} items "
            f"({len(thin.cases)} items: {thin.named}); intervals resample hazards, and a thin hazard's numbers rest "
            "on a handful of answers",
            len(thin.cases), thin.cases))
    prompts: dict[str, list[str]] = defaultdict(list)
    for item in items:
        prompts[" ".join(render_prompt(item).casefold().split())].append(item.id)
    duplicates = [ids for ids in prompts.values() if len(ids) > 1]
    if duplicates:
        cases = tuple(i for ids in duplicates for i in ids)
        named = "; ".join(" = ".join(ids) for ids in duplicates[:3]) + ("; ..." if len(duplicates) > 3 else "")
        findings.append(Finding(
            "duplicate_question",
            f"{len(cases)} items ask {len(duplicates)} question(s) twice or more, context and all ({named}); "
            "each repeat counts the same answer again",
            len(cases), cases))
    missing = [(item.id, unreferenced_notes(item)) for item in items]
    missing = [(item_id, fields) for item_id, fields in missing if fields]
    if missing:
        named = "; ".join(f"{item_id}: {', '.join(fields)}" for item_id, fields in missing[:3])
        findings.append(Finding(
            "item_without_reference",
            f"{len(missing)} item(s) have reference notes the reference scorer cannot match ({named}"
            f"{'; ...' if len(missing) > 3 else ''}); that dimension scores low whatever the answer says",
            len(missing), tuple(item_id for item_id, _ in missing)))
    return findings
