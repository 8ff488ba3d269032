"""ebs-baseline: a lexical and climate-zone predictor of env_broad_scale.

It reads only the prompt: the metadata slots and, when given, the allowed
values. Each candidate biome is scored by how many of its label's words
(after mapping common land-cover synonyms) appear in the sample's
env_local_scale, env_medium and study text, plus a bonus when its climate
word (tropical, temperate, ...) agrees with the zone of the geographic
location. With no allowed values it chooses among ENVO's biome subtree.
"""

from __future__ import annotations

import re
from functools import lru_cache


from fieldeval.baselines import BaselineModel, registers

BIOME = "ENVO:00000428"
_ALLOWED_LINE = re.compile(r"^\s*-\s*(?P<label>.+?)\s*\[(?P<curie>[A-Za-z][A-Za-z0-9_]*:\d+)\]\s*$")
_SLOTS = {
    "Study": "study_name",
    "Description": "description",
    "Notes": "notes",
    "env_local_scale": "env_local_scale",
    "env_medium": "env_medium",
    "Geographic location": "geo_loc_name",
}
_SLOT_WEIGHTS = {"env_local_scale": 3.0, "env_medium": 2.0, "study_name": 0.5, "description": 0.5, "notes": 0.5}
_GENERIC = {"biome", "environment", "zone", "area", "of", "and", "the", "ecosystem"}
_CLIMATES = {"tropical", "subtropical", "temperate", "subpolar", "polar", "boreal", "arctic", "alpine", "montane"}

# land-cover words in metadata -> words used in biome labels
_SYNONYMS = {
    "needleleaf": "coniferous", "conifer": "coniferous", "pine": "coniferous", "spruce": "coniferous",
    "deciduous": "broadleaf", "hardwood": "broadleaf",
    "scrub": "shrubland", "shrub": "shrubland", "shrubs": "shrubland", "chaparral": "shrubland",
    "prairie": "grassland", "herbaceous": "grassland", "meadow": "grassland", "steppe": "grassland",
    "pasture": "cropland", "pastureland": "cropland", "hayfields": "cropland", "farm": "cropland",
    "agricultural": "cropland", "crop": "cropland", "crops": "cropland", "cultivated": "cropland",
    "woods": "forest", "woody": "forest", "woodland": "woodland",
    "riffle": "stream", "creek": "stream", "brook": "stream", "river": "river",
    "sea": "marine", "ocean": "marine", "oceanic": "marine", "seawater": "marine", "photic": "epipelagic",
    "estuary": "estuarine", "lake": "lake", "pond": "pond", "wetland": "wetland", "marsh": "marsh",
    "desert": "desert", "tundra": "tundra", "mangrove": "mangrove", "urban": "urban",
    "rhizosphere": "plant", "root": "plant", "leaf": "plant", "phyllosphere": "plant",
}

# coarse climate zone of places that a location string may name (word -> zone)
_ZONES = {
    "tropical": ["pr", "puerto", "rico", "brazil", "panama", "costa", "rica", "indonesia", "malaysia",
                 "thailand", "philippines", "kenya", "congo", "colombia", "peru", "ecuador", "guam"],
    "subtropical": ["fl", "florida", "hi", "hawaii", "la", "louisiana", "mississippi", "ms", "georgia", "ga",
                    "al", "alabama", "sc", "south", "carolina", "mexico", "egypt", "taiwan", "queensland"],
    "temperate": ["ca", "california", "co", "colorado", "ks", "kansas", "tx", "texas", "ok", "oklahoma", "ma",
                  "massachusetts", "tn", "tennessee", "ia", "iowa", "ny", "york", "wa", "washington", "or",
                  "oregon", "mi", "michigan", "wi", "wisconsin", "mn", "minnesota", "pa", "pennsylvania", "nc",
                  "north", "va", "virginia", "oh", "ohio", "il", "illinois", "ne", "nebraska", "germany",
                  "france", "england", "japan", "china", "victoria", "new", "zealand", "netherlands"],
    "subpolar": ["ak", "alaska", "yukon", "finland", "sweden", "norway", "siberia", "iceland"],
    "polar": ["arctic", "antarctica", "greenland", "svalbard"],
}
_ZONE_OF = {place: zone for zone, places in _ZONES.items() for place in places}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", re.sub(r"\[[^\]]*\]", " ", text.lower()))


def _normalise(word: str) -> str:
    word = _SYNONYMS.get(word, word)
    return word[:-1] if word.endswith("s") and len(word) > 4 and not word.endswith("ss") else word


def parse_prompt(prompt: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The metadata slots and allowed (label, CURIE) values stated in an EBS prompt."""
    slots: dict[str, str] = {}
    allowed: list[tuple[str, str]] = []
    for line in prompt.splitlines():
        match = _ALLOWED_LINE.match(line)
        if match:
            allowed.append((match.group("label"), match.group("curie")))
            continue
        key, sep, value = line.partition(":")
        if sep and key.strip() in _SLOTS:
            slots[_SLOTS[key.strip()]] = value.strip()
    return slots, allowed


def climate_zone(location: str) -> str | None:
    """The coarse climate zone of a location string, when one of its words is known."""
    words = re.findall(r"[a-z]+", location.lower())
    parts = [w for w in words if w != "usa"]
    for word in parts:
        if word in _ZONE_OF:
            return _ZONE_OF[word]
    return None


@lru_cache(maxsize=1)
def _envo_biomes() -> tuple[tuple[str, str], ...]:
    from fieldeval.ontology import load_index

    index = load_index()
    return tuple(sorted((label, curie) for curie, label in index.labels.items()
                        if BIOME in index.ancestors.get(curie, ())))


def predict(prompt: str) -> str:
    """The baseline's ``label [CURIE]`` for one env_broad_scale prompt."""
    slots, candidates = parse_prompt(prompt)
    if not candidates:
        candidates = list(_envo_biomes())
    evidence: dict[str, float] = {}
    for slot, weight in _SLOT_WEIGHTS.items():
        for word in _words(slots.get(slot, "")):
            word = _normalise(word)
            evidence[word] = max(evidence.get(word, 0.0), weight)
    zone = climate_zone(slots.get("geo_loc_name", ""))

    def score(candidate: tuple[str, str]) -> tuple[float, int, str]:
        words = [_normalise(w) for w in _words(candidate[0]) if w not in _GENERIC]
        total = 0.0
        for word in words:
            if word in _CLIMATES:
                total += 1.5 if word == zone or word in evidence else -1.0
            else:
                total += evidence.get(word, -0.75)
        return total, -len(words), candidate[0]

    label, curie = max(candidates, key=score)
    return f"{label} [{curie}]"


class EbsBaseline(BaselineModel):
    """Offline env_broad_scale baseline: lexical match plus climate zone, never the answer."""

    model_id = "ebs-baseline"
    respond = staticmethod(predict)


register_models = registers(EbsBaseline)  # this module is an llm plugin
