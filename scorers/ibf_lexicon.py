"""Word lists of the IBF reference scorer: generic rubric words and everyday hazard and impact language.

Data only. Generic lists hold six-letter stems (a response word counts when
its first six letters start with one). Everyday lists hold *root phrases*: a
phrase is present when its roots begin words of the response in order, at
most three words apart, so "burst bank" matches "the river will burst its
banks". An impact object counts only within six words of a harm word.
"""

from __future__ import annotations

# any of these stems anywhere means the response talks about some hazard (rubric level 1)
HAZARD_WORDS = ("flood", "inunda", "cyclon", "hurric", "typhoo", "storm", "surge", "drough", "heatwa", "heat",
                "cold", "frost", "landsl", "mudsli", "debris", "rain", "wildfi", "fire", "tsunam", "dzud",
                "snow", "wind", "erupti", "volcan", "dry", "hail")
IMPACT_WORDS = ("impact", "affect", "damage", "loss", "losses", "disrup", "harm", "casual", "death", "injur",
                "vulner", "expose", "exposu", "risk")
ACTION_WORDS = ("prepos", "pre", "evacua", "warn", "alert", "cash", "distri", "stockp", "mobili", "shelte",
                "suppli", "prepar", "protec", "relief", "respon")
HEDGE_WORDS = ("uncert", "may", "might", "could", "likely", "unlike", "probab", "possib", "chance", "confid",
               "range", "scenar", "error", "margin", "depend", "sensit", "variab", "assump", "unknow", "estima",
               "uncerta")

# hazard type (as in the corpus) -> how people name it outright, and how they describe it in everyday words
HAZARD_NAMES: dict[str, tuple[str, ...]] = {
    "riverine flood": ("river flood",),
    "flash flood": ("flash flood",),
    "urban flood": ("urban flood", "pluvial"),
    "coastal flood": ("coastal flood", "king tide"),
    "storm surge": ("storm surge", "tidal surge"),
    "glacial lake outburst flood": ("glacial lake", "glof", "outburst"),
    "tropical cyclone": ("cyclone", "typhoon", "hurricane", "tropical storm"),
    "drought": ("drought",),
    "heatwave": ("heatwave", "heat wave"),
    "cold wave": ("cold wave", "cold spell", "cold snap"),
    "dzud": ("dzud",),
    "landslide": ("landslide", "landslip", "mudslide", "debris flow"),
    "wildfire": ("wildfire", "forest fire", "bushfire", "bush fire"),
}
HAZARD_DESCRIPTORS: dict[str, tuple[str, ...]] = {
    "riverine flood": ("burst bank", "break bank", "over bank", "overflow bank", "swollen river", "river swell",
                       "river rise", "river rising", "river water", "high water", "under water", "water rise",
                       "water rising", "submerg", "inundat"),
    "flash flood": ("sudden flood", "wall water", "rush water", "torrent", "water come down", "gush",
                    "within hour", "stream swell", "swollen stream"),
    "urban flood": ("street under water", "streets under water", "water street", "drain overflow",
                    "drains overflow", "overflowing drain", "waterlogg", "flooded street", "standing water",
                    "roads under water", "downpour"),
    "coastal flood": ("sea wash", "wave wash", "waves over", "wave over", "high tide", "spring tide",
                      "sea water into", "seawater into", "sea come", "sea flood", "swell"),
    "storm surge": ("sea surge", "sea rush", "sea rise", "sea rising", "wall seawater", "wall sea",
                    "seawater inland", "sea inland", "pushed ashore", "wave inland", "high tide"),
    "glacial lake outburst flood": ("lake burst", "lake break", "glacier lake", "ice dam", "melting glacier",
                                    "glacier melt", "lake spill", "lake overflow", "lake empty"),
    "tropical cyclone": ("howling wind", "fierce wind", "violent wind", "violent storm", "strong wind",
                         "powerful storm", "big storm", "huge storm", "severe storm", "gale", "roof ripped",
                         "roofs ripped", "roof torn", "roofs torn", "blow roof", "landfall"),
    "drought": ("no rain", "little rain", "rain fail", "rains fail", "failed rain", "parched", "bone dry",
                "dry month", "dry season", "dry spell", "dry week", "dried up", "dry up", "wells dry",
                "water run out", "scarce water", "water scarce", "lack rain"),
    "heatwave": ("scorch", "swelter", "blister", "searing", "baking", "boiling", "hot day", "hot week",
                 "hot weather", "extreme heat", "intense heat", "heat stroke", "heatstroke", "very hot",
                 "hot spell", "hot night"),
    "cold wave": ("bitter frost", "bitter cold", "biting cold", "freezing", "frost", "icy", "frozen",
                  "sub zero", "below zero", "very cold", "extreme cold", "cold night", "cold week"),
    "dzud": ("harsh winter", "bitter winter", "severe winter", "deep snow", "frozen pasture", "snow cover",
             "snow pasture", "ice pasture", "white winter", "winter disaster"),
    "landslide": ("hillside collapse", "hillside give way", "slope collapse", "slope give way", "slopes give way",
                  "hill collapse", "mud slide", "mud slid", "earth slide", "rock fall", "rockfall", "rocks fall",
                  "mud bury", "buried mud", "ground give way", "slopes slide", "hillside slide"),
    "wildfire": ("blaze", "flame", "burning forest", "forest burn", "bush burn", "smoke", "haze",
                 "fire spread", "fires spread", "burning", "ember", "scorched land"),
}

# impact kind -> everyday things that get hurt; one counts only near a HARM word
IMPACT_OBJECTS: dict[str, tuple[str, ...]] = {
    "societal": ("home", "famil", "people", "child", "elderly", "villag", "resident", "neighbour",
                 "live", "life", "babies", "baby", "worker", "labour", "herder", "pupil", "patient", "fisher"),
    "agricultural": ("crop", "harvest", "field", "herd", "cattle", "cow", "goat", "sheep", "camel", "livestock",
                     "animal", "farm", "rice", "maize", "wheat", "pasture", "grazing", "orchard", "fruit", "fish",
                     "poultry", "chicken", "alpaca", "llama", "garden", "seed", "paddy", "yield", "milk"),
    "infrastructure": ("road", "bridge", "power", "electric", "pipe", "wells", "school", "hospital", "building",
                       "roof", "house", "highway", "rail", "phone", "network", "drain", "sewer", "embankment",
                       "seawall", "tap", "clinic", "market", "shop", "boat", "jetty", "causeway"),
}
HARM_WORDS = ("swept", "wash", "destroy", "starv", "die", "dying", "dead", "death", "drown", "sick", "ill",
              "hunger", "hungry", "homeless", "collaps", "cut", "flatten", "burn", "lose", "lost", "losing",
              "ruin", "wither", "freez", "frozen", "trap", "buri", "bury", "injur", "damag", "suffer", "strand",
              "blackout", "outage", "short", "wreck", "smash", "torn", "rip", "block", "close", "shut",
              "spoil", "rot", "thirst", "malnutri", "disease", "cholera", "faint", "exhaust", "cough", "choke",
              "disrupt", "overwhelm", "contamin", "salt", "isolat", "stuck", "crack", "burst")
