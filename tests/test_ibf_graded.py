"""The reference scorer against hand-graded responses: strong, plain-language medium and off-topic answers.

Each response below was written for a real corpus item and graded by hand
against the seed rubric (0-4 per dimension) before the scorer saw it. A
medium answer names the hazard and its impacts only in everyday words; an
off-topic answer is about a different hazard or only gives facts about the
country. Grades are (hazard_recognition, impact_reasoning,
uncertainty_handling, action_relevance, geographic_specificity).
"""

from __future__ import annotations

import pytest

from fieldeval.benchmarks.ibf.corpus import load_corpus
from scorers.ibf import DIMENSIONS, score_reference
from scorers.ibf_lexicon import HAZARD_DESCRIPTORS, HAZARD_NAMES

MAX_MEAN_ABSOLUTE_ERROR = 1.0

GRADED: dict[str, dict[str, tuple[str, tuple[int, int, int, int, int]]]] = {
    "ibf_0001": {  # riverine flood, Jamuna, Bangladesh
        "strong": (
            ("The FFWC forecasts the Jamuna to reach 0.85 m above danger level at Bahadurabad within 120 hours: a "
             "riverine flood. Char island communities in Kurigram, Gaibandha and Sirajganj (Rangpur and Rajshahi "
             "divisions) may be cut off, riverside households displaced, and aman rice seedbeds and standing crops "
             "inundated; roads and bridges could be cut and wells contaminated, raising the risk of cholera. Early "
             "actions: move livestock to raised plinths, pre-position relief supplies, disseminate early warning to "
             "communities, cash transfers to at-risk households, and distribute water purification tablets. "
             "Uncertainty: GloFAS and FFWC forecasts diverge at five days, and the timing and height of the peak "
             "depend on upstream rainfall; embankment breaches could change the extent."),
            (4, 4, 3, 4, 4),
        ),
        "medium": (
            ("The river is going to burst its banks in the north of Bangladesh in the coming days. Homes close to "
             "the water could be swept away, cattle may drown and farmers might lose the rice in their fields. "
             "People should be warned to move their animals to higher ground and get ready to leave. It is not "
             "certain exactly when the water will be highest."),
            (3, 2, 2, 2, 2),
        ),
        "off_topic": (
            ("Bangladesh is a densely populated country in South Asia with its capital at Dhaka. Its economy "
             "depends on garment exports, it gained independence in 1971, and cricket is the most popular sport."),
            (0, 0, 0, 0, 1),
        ),
    },
    "ibf_0012": {  # flash flood, Melamchi, Nepal
        "strong": (
            ("180 mm of rain in 24 hours over the Melamchi catchment could trigger a flash flood within hours. "
             "Melamchi bazaar residents and people crossing channels and fords risk being swept away; terraced rice "
             "fields may lose topsoil, and roads, culverts and the Melamchi water supply headworks may be washed "
             "out. Actions: evacuate Melamchi bazaar, warn communities living along channels, close fords and "
             "low-water crossings, move people from riverbanks to higher ground and pre-position search and rescue "
             "teams in Sindhupalchok, Nepal. Communicate that the exact location of the heaviest convective "
             "rainfall is uncertain, the lead time is very short, and debris from earlier landslides blocking the "
             "channel could worsen it."),
            (4, 4, 3, 4, 4),
        ),
        "medium": (
            ("Very heavy rain in the hills will send a sudden rush of water down the Melamchi river within hours. "
             "People crossing streams could be swept away and houses near the water destroyed; fields on the "
             "terraces may be washed out. Tell people near the river to move up the hill now. Nobody can say "
             "exactly where the heaviest rain will fall."),
            (3, 2, 2, 2, 1),
        ),
        "off_topic": (
            ("A long drought is expected: the land will be parched, so farmers should plant drought-tolerant seed "
             "and store water for the dry months."),
            (1, 0, 0, 0, 0),
        ),
    },
    "ibf_0018": {  # tropical cyclone, Sundarbans, Bangladesh
        "strong": (
            ("A severe tropical cyclone with maximum sustained winds of 150 km/h is expected to make landfall near "
             "the Sundarbans within 48 hours. Coastal villagers in Satkhira, Khulna and Bagerhat (Khulna Division, "
             "Bangladesh) face casualties from collapsing buildings and flying debris; shrimp farms, crops and "
             "fishing boats may be lost; roofs and houses destroyed, power and telecommunications outages and roads "
             "blocked by fallen trees. Actions: Cyclone Preparedness Programme volunteers warn villages, evacuate "
             "coastal and low-lying areas to cyclone shelters, bring fishing boats ashore, pre-position food, water "
             "and shelter kits and make cash transfers before landfall. Uncertainties: the track forecast error and "
             "landfall location along the Sundarbans coast, and intensity change before landfall; a shift of "
             "50-100 km would change which districts are hit."),
            (4, 4, 4, 4, 4),
        ),
        "medium": (
            ("A huge storm with howling winds is heading for the coast of Bangladesh in two days. Roofs could be "
             "torn off, fishing boats smashed and trees brought down on the roads. People living by the sea should "
             "go to the shelters and fishermen should stay home. The storm might turn before it reaches land."),
            (3, 2, 2, 2, 2),
        ),
        "off_topic": (
            ("Bangladesh has about 170 million people. Its capital is Dhaka, its currency is the taka, and the "
             "Padma Bridge opened in 2022."),
            (0, 0, 0, 0, 1),
        ),
    },
    "ibf_0027": {  # storm surge, Odisha, India
        "strong": (
            ("IMD warns of a storm surge of 2-3 m above the astronomical tide within 36 hours on the Odisha coast. "
             "Fishing villages and low-lying coastal settlements in Kendrapara, Jagatsinghpur and Bhadrak face "
             "drowning and displacement; salinisation of rice fields and loss of shrimp ponds; breached coastal "
             "embankments, destroyed houses and damaged coastal roads and jetties. I would activate the EAP: "
             "evacuate low-lying coastal villages to multipurpose cyclone shelters, move livestock to raised "
             "ground, give early warning to coastal communities and pre-position drinking water. The decision hinges "
             "on surge timing relative to high tide and the landfall location; the surge could be a metre lower if "
             "landfall comes at low tide."),
            (4, 4, 3, 4, 4),
        ),
        "medium": (
            ("The sea is going to rush inland along the coast of Odisha when the storm arrives, maybe two or three "
             "metres of water. Fishing villages could be flooded, people may drown and salt water will ruin the "
             "rice paddies. Families should leave the low villages for higher shelters. How bad it gets depends on "
             "whether it comes at high tide."),
            (3, 2, 3, 2, 3),
        ),
        "off_topic": (
            ("Temperatures in India will climb above 45°C; people should drink plenty of water and avoid working "
             "outdoors at midday."),
            (1, 0, 0, 0, 1),
        ),
    },
    "ibf_0033": {  # drought, northern Kenya
        "strong": (
            ("The NDMA drought early warning shows the October-December short rains forecast below normal with 60% "
             "probability (SPI -1.5). In Marsabit and Turkana counties, including North Horr and Turkana North, "
             "pastoralist children face acute malnutrition and food insecurity; goats and camels face pasture "
             "depletion and livestock deaths, and crops will fail; boreholes and water points dry up and markets "
             "are disrupted. Yes, activate the EAP: commercial destocking of livestock, cash transfers, water "
             "trucking and borehole rehabilitation, animal feed and fodder, and nutrition screening. The forecast "
             "is probabilistic: the short rains onset and distribution within the season are uncertain, and "
             "seasonal forecast skill here is moderate, so stage actions as the season unfolds."),
            (4, 4, 4, 4, 4),
        ),
        "medium": (
            ("The rains are likely to fail again in northern Kenya and the land will be parched for months. Herds "
             "of goats and camels may starve, children could go hungry and water points will dry up. Help herders "
             "sell some animals early and truck water in. The rains could still come late, so the forecast is not "
             "sure."),
            (3, 2, 2, 2, 2),
        ),
        "off_topic": (
            ("The river will overflow and flood the town; people should move to higher ground and sandbag their "
             "homes."),
            (1, 0, 0, 0, 0),
        ),
    },
    "ibf_0041": {  # heatwave, Sindh, Pakistan
        "strong": (
            ("PMD's heatwave alert forecasts maximum temperatures of 47-50°C in Jacobabad and 42°C in Karachi with "
             "high humidity over the next 72 hours in Sindh, Pakistan. Daily-wage labourers, elderly people, infants "
             "and outdoor workers face heatstroke, dehydration and heat-related deaths; poultry and livestock suffer "
             "heat stress and milk yield drops; electricity load-shedding, power outages from peak demand, water "
             "supply shortages and hospital overload are likely. Actions: open cooling centres and heat relief "
             "camps, set up drinking water points, issue heat health warnings, adjust outdoor working hours and "
             "prepare hospitals for heatstroke cases. Uncertainty: a sea breeze in Karachi could lower temperatures "
             "by 2-3°C, and the duration of the heatwave and night-time temperatures are uncertain."),
            (4, 4, 4, 4, 3),
        ),
        "medium": (
            ("A scorching week ahead for the south of Pakistan, with blistering afternoons. Labourers working "
             "outside could collapse, old people may die at home and chickens on farms could die; the power may cut "
             "out as everyone turns on fans. Open some cool places where people can rest and hand out drinking "
             "water. It may be a little less hot near the sea."),
            (3, 2, 2, 2, 2),
        ),
        "off_topic": (
            ("Pakistan's largest city is Karachi and its capital is Islamabad. The country's main crops are wheat, "
             "cotton and rice, and K2 is its highest mountain."),
            (0, 0, 0, 0, 1),
        ),
    },
    "ibf_0047": {  # cold wave, Puno, Peru
        "strong": (
            ("SENAMHI's frost (heladas) alert forecasts minimum temperatures down to -18°C above 4,000 m on the "
             "Altiplano within 72 hours: a cold wave. In Puno, especially Lampa and Carabaya, children in highland "
             "communities face hypothermia and respiratory infections; alpaca and llama herds face livestock deaths "
             "and young animals dying of cold, with frost damage to crops; frozen water pipes and rural school "
             "closures. Actions: reinforce cobertizos (livestock shelters) and supply fodder, distribute blankets "
             "and warm clothing, supply heating fuel and issue cold health warnings. Uncertainty: how low minimum "
             "temperatures fall (they could vary by 3-5°C), the snowfall accompanying the frost, and the duration "
             "of the cold spell."),
            (4, 4, 4, 4, 4),
        ),
        "medium": (
            ("Bitter frost for weeks in the high Andes of Peru. Children in the mountain villages could fall sick, "
             "young alpacas and llamas may freeze to death, and water pipes could freeze. Give families blankets "
             "and warm clothes and help them shelter their animals. Nobody knows yet how cold the nights will get."),
            (3, 2, 2, 3, 2),
        ),
        "off_topic": (
            ("Forest fires are spreading and smoke will fill the valleys; firefighters should be deployed and "
             "burning should be banned."),
            (1, 0, 0, 0, 0),
        ),
    },
    "ibf_0052": {  # dzud, western Mongolia
        "strong": (
            ("NAMEM's dzud risk map shows snow depth of 30 cm and minimum temperatures of -45°C in the western "
             "aimags of Mongolia over the next 10 days. Herder families in Zavkhan and Uvs, including Tosontsengel "
             "and Züüngovi, face mass livestock deaths and starvation of sheep, goats and cattle as pasture is "
             "covered by snow, loss of livelihoods and isolation; winter roads closed by snow and heating fuel "
             "shortages. Sequence: early warning to herders now, cash transfers to herders and hay and fodder "
             "distribution in the first week, animal health kits, and livestock destocking before the worst. "
             "Uncertain: the snow depth may vary, and the duration of extreme cold and spring temperatures will "
             "decide the losses."),
            (4, 4, 3, 4, 4),
        ),
        "medium": (
            ("A harsh winter with deep snow is coming to western Mongolia. Sheep and goats could starve because the "
             "grass is buried, and herder families may lose most of their animals; roads could be blocked by snow. "
             "Bring hay and fodder to the herders and warn them early. It is hard to say how long the extreme cold "
             "will last."),
            (3, 2, 2, 3, 2),
        ),
        "off_topic": (
            ("Mongolia is a landlocked country between Russia and China. Ulaanbaatar is its capital, and Genghis "
             "Khan founded the Mongol Empire in 1206."),
            (0, 0, 0, 0, 1),
        ),
    },
    "ibf_0053": {  # landslide, Kali Gandaki, Nepal
        "strong": (
            ("DHM warns of landslides: 250 mm of rain in 72 hours on saturated slopes in the Kali Gandaki valley, "
             "Nepal, within 48 hours. Hillside households in Myagdi and Kaski (Gandaki Province) risk people buried "
             "and casualties, terraced rice fields and farmland buried, livestock lost, the Beni-Jomsom road "
             "blocked, houses destroyed and water supply damaged. Actions: evacuate households from high-risk "
             "slopes or temporary relocation, early warning to communities, close mountain roads, pre-position "
             "search and rescue, and monitor cracks and slope movement. Uncertainty: the exact location of slope "
             "failures cannot be predicted, and rainfall threshold exceedance depends on antecedent soil moisture."),
            (4, 4, 3, 4, 4),
        ),
        "medium": (
            ("Days of rain could make the hillsides give way in the Kali Gandaki valley. Houses on the slopes could "
             "be buried in mud, and the road to Jomsom may be blocked for days. Families on steep slopes should "
             "move somewhere safer until the rain stops. We cannot know exactly which slopes will fail."),
            (3, 2, 2, 2, 1),
        ),
        "off_topic": (
            ("Freezing temperatures are expected; distribute blankets and heating fuel to keep families warm."),
            (1, 0, 0, 0, 0),
        ),
    },
    "ibf_0063": {  # wildfire, Chiquitania, Bolivia
        "strong": (
            ("SENAMHI's extreme fire danger alert (fire weather index above 50, 60 consecutive dry days) means "
             "wildfires are likely in the Chiquitania, Santa Cruz, Bolivia, in the next 5 days. Indigenous "
             "communities around San Ignacio de Velasco and Roboré face smoke and haze causing respiratory illness "
             "and displacement; cattle pasture and crops will burn and livestock may die; power lines, houses and "
             "airports (closures from haze) are exposed. Activate the EAP: ban agricultural burning, pre-position "
             "firefighting teams, support community fire brigades, distribute masks and issue early warning. "
             "Uncertain: wind direction and ignitions from land clearing, and the rainfall onset could end the "
             "season early."),
            (4, 4, 3, 4, 4),
        ),
        "medium": (
            ("With weeks of dry weather, flames could race through the forests of eastern Bolivia. Smoke will make "
             "people cough and children sick, cattle may lose their grazing land and houses near the forest could "
             "burn. Stop people burning fields and get firefighters ready. A lot depends on which way the wind "
             "blows."),
            (3, 2, 2, 3, 2),
        ),
        "off_topic": (
            ("Bolivia has two capitals, La Paz and Sucre, and the largest salt flat in the world, the Salar de "
             "Uyuni. Lithium is one of its key resources."),
            (0, 0, 0, 0, 1),
        ),
    },
}
QUALITIES = ("strong", "medium", "off_topic")


@pytest.fixture(scope="module")
def references() -> dict[str, dict]:
    items = {item.id: item for item in load_corpus().items}
    return {item_id: items[item_id].references.model_dump() for item_id in GRADED}


@pytest.fixture(scope="module")
def scored(references) -> dict[tuple[str, str], tuple[int, ...]]:
    return {(item_id, quality): score_reference(GRADED[item_id][quality][0], references[item_id]).values
            for item_id in GRADED for quality in QUALITIES}


def _mds(values) -> float:
    return sum(values) / len(values)


def test_graded_items_cover_at_least_eight_hazard_types():
    hazards = {item.hazard for item in load_corpus().items if item.id in GRADED}
    assert len(hazards) >= 8


def test_every_corpus_hazard_type_has_everyday_words():
    items = load_corpus().items
    types = {item.references.hazard.type for item in items} | {item.hazard for item in items}
    assert types <= set(HAZARD_DESCRIPTORS) and types <= set(HAZARD_NAMES)


@pytest.mark.parametrize("item_id", sorted(GRADED))
def test_strong_beats_plain_language_beats_off_topic(item_id, scored):
    strong, medium, off_topic = (_mds(scored[item_id, quality]) for quality in QUALITIES)
    assert strong > medium > off_topic


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_mean_absolute_error_against_hand_grades_is_at_most_1(dimension, scored):
    i = DIMENSIONS.index(dimension)
    errors = [abs(scored[item_id, quality][i] - GRADED[item_id][quality][1][i])
              for item_id in GRADED for quality in QUALITIES]
    assert sum(errors) / len(errors) <= MAX_MEAN_ABSOLUTE_ERROR


@pytest.mark.parametrize("item_id", sorted(GRADED))
def test_plain_language_hazard_scores_2_or_3(item_id, scored):
    # the regression this file exists for: everyday words used to score like an off-topic answer
    assert scored[item_id, "medium"][0] in (2, 3)


@pytest.mark.parametrize("item_id", sorted(GRADED))
def test_off_topic_answer_scores_at_most_1_on_hazard_and_impacts(item_id, scored):
    assert max(scored[item_id, "off_topic"][:2]) <= 1


def test_plain_impact_words_score_2(references):
    refs = references["ibf_0001"]
    assert score_reference("Homes could be swept away and herds may starve.", refs).impact_reasoning == 2


def test_answer_about_a_different_hazard_is_a_mismatch(references):
    refs = references["ibf_0041"]  # heatwave
    answer = score_reference("Bitter frost for weeks: pipes will freeze and herds may starve.", refs)
    assert (answer.hazard_recognition, answer.impact_reasoning) == (1, 1)
