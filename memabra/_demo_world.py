"""The simulated world of ``memabra demo``: users, their facts, their tasks, tools and skills.

Seeded and self-contained. Each user has facts (diet, allergy, city, coffee, work, units, name,
dog) mixed with small talk the router should leave out. Tasks need specific facts, and some a
tool or a skill; their wording rarely shares words with the fact they need ("what should I cook
tonight?" needs "I follow a vegetarian diet"), which is exactly where similarity top-k fails.
Partway through, users drift: they move city and change how they take their coffee; the old
facts stay in memory, now stale.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.tools import BaseTool, StructuredTool

from memabra._catalog import Skill

__all__ = ["ASSOCIATIONS", "SKILLS", "TASKS", "Fact", "SimUser", "Task", "World", "make_tools"]

NAMES = ["Ann", "Bruno", "Chen", "Dara", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas", "Kofi", "Lena"]
CITIES = ["Lyon", "Oslo", "Porto", "Kyoto", "Quito", "Tartu", "Bergen", "Cusco", "Dakar", "Hobart"]
DIETS = ["vegetarian", "vegan", "pescatarian", "halal", "keto"]
ALLERGENS = ["peanuts", "gluten", "sesame", "shellfish", "lactose"]
COFFEES = ["flat white", "espresso", "oat latte", "cortado", "americano"]
JOBS = [
    ("nurse", "St Anne clinic"),
    ("architect", "Nordform"),
    ("teacher", "Riverside school"),
    ("chef", "Casa Verde"),
    ("pilot", "SkyLine"),
]
UNITS = ["metric", "imperial"]
DOGS = ["Rex", "Luna", "Pixel", "Mochi", "Biscuit"]
SMALL_TALK = [
    "Yesterday the train to work was twenty minutes late",
    "I watched a documentary about deep sea creatures last weekend",
    "My neighbour started learning the trumpet, which is loud",
    "We repainted the hallway a pale green colour",
    "I finally finished that thousand piece puzzle",
    "The bakery on the corner changed its opening hours",
    "I have been reading a long novel about sailors",
    "Our team won the quiz night at the pub",
    "I lost my umbrella on the bus again last month",
    "My sister sent photos from her holiday by the sea",
    "I tried a pottery class and made a wonky bowl",
    "The city marathon closed our street on Sunday",
    "I keep forgetting to water the plants on the balcony",
    "My laptop battery barely lasts two hours now",
]


@dataclass(frozen=True, slots=True)
class Fact:
    category: str
    text: str
    value: str


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    queries: tuple[str, ...]
    facts: tuple[str, ...]
    tool: str | None = None
    skill: str | None = None


TASKS: tuple[Task, ...] = (
    Task(
        "dinner",
        ("What should I cook for dinner tonight?", "Any idea what to make for supper?", "Plan my evening meal"),
        ("diet",),
        skill="recipe-format",
    ),
    Task("snack", ("Pick a snack for my flight", "What can I nibble on during the trip?"), ("allergy",)),
    Task(
        "weather",
        ("What will the weather be like tomorrow?", "Do I need an umbrella tomorrow?"),
        ("city",),
        tool="get_weather",
    ),
    Task(
        "drink",
        ("Order my usual morning drink", "Get me my regular morning pick-me-up"),
        ("coffee",),
        tool="order_drink",
    ),
    Task(
        "away",
        ("Write an out-of-office note for my colleagues", "Draft a message telling my team I am away"),
        ("work",),
        skill="email-style",
    ),
    Task(
        "run",
        ("How long is a 10k run in the measurement system I use?", "Convert my 10k race distance for me"),
        ("units",),
        tool="convert_units",
    ),
    Task("greet", ("Greet me properly this morning", "Say good morning to me"), ("name",)),
    Task("pet", ("What should I pick up at the pet shop?", "Buy some treats for my dog"), ("dog",)),
    # Shares no word with the tool it needs: the router tends to leave set_timer out, and only a
    # model that can search the registry (find_tools) gets it; the miss then teaches the router.
    Task("pasta", ("Tell me when the pasta is done", "Let me know when my tea has brewed"), (), tool="set_timer"),
)

# How often each task comes up. After the drift the weather and coffee tasks come up more, so
# the facts that changed matter more.
_MIX_BEFORE = {"dinner": 3, "weather": 3, "drink": 3, "greet": 2, "snack": 2, "away": 2, "run": 2, "pet": 2, "pasta": 2}
_MIX_AFTER = {"dinner": 3, "weather": 4, "drink": 4, "greet": 2, "snack": 2, "away": 2, "run": 2, "pet": 2, "pasta": 2}

# What a real model knows: which words relate. The stand-in model uses these; the router does not.
ASSOCIATIONS: dict[str, tuple[str, ...]] = {
    "food": ("cook", "dinner", "supper", "meal", "evening", "diet", *DIETS),
    "snack": ("snack", "nibble", "flight", "trip", "allergic", *ALLERGENS),
    "place": ("weather", "umbrella", "tomorrow", "forecast", "live", "moved", *(c.lower() for c in CITIES)),
    "coffee": (
        "drink",
        "morning",
        "pick-me-up",
        "usual",
        "regular",
        "coffee",
        "order",
        *(w for c in COFFEES for w in c.split()),
    ),
    "work": ("out-of-office", "colleagues", "team", "away", "message", "note", "work", "works"),
    "units": ("10k", "run", "race", "distance", "measurement", "units", "metric", "imperial", "convert"),
    "name": ("greet", "good", "morning", "properly", "name"),
    "dog": ("pet", "shop", "treats", "dog", "called"),
    "timer": ("pasta", "done", "tea", "brewed", "timer", "countdown", "minutes"),
}

SKILLS: tuple[Skill, ...] = (
    Skill(
        "recipe-format",
        "how to present a recipe or a cooking suggestion for a meal",
        "Give the dish, then three numbered steps.\nMarker: Enjoy your meal!",
    ),
    Skill(
        "email-style",
        "how to write a work email or a note for colleagues and a team",
        "Greet, one short paragraph, sign off.\nMarker: Kind regards.",
    ),
    Skill(
        "code-review",
        "how to review a pull request and source code changes",
        "List blocking issues first.\nMarker: LGTM with nits.",
    ),
    Skill("trip-planner", "how to plan a holiday itinerary day by day", "One line per day.\nMarker: Bon voyage!"),
    Skill(
        "budget-advice",
        "how to give personal finance and savings advice",
        "Start with the monthly total.\nMarker: Save first, spend later.",
    ),
    Skill("poetry", "how to write a short poem or a limerick", "Rhyme AABBA.\nMarker: Fin."),
)


def _find(options: Sequence[str], request: str) -> str | None:
    lowered = request.lower()
    for option in options:
        if re.search(rf"\b{re.escape(option.lower())}\b", lowered):
            return option
    return None


def make_tools() -> list[BaseTool]:
    """The demo's tools. The useful ones fail without the fact they need in the request."""

    def get_weather(request: str) -> str:
        city = _find(CITIES, request)
        if city is None:
            raise ValueError("which city? the request names none")
        return f"Forecast for {city}: 18C and cloudy"

    def order_drink(request: str) -> str:
        drink = _find(COFFEES, request)
        if drink is None:
            raise ValueError("which drink? the request names none")
        return f"Ordered a {drink}"

    def convert_units(request: str) -> str:
        system = _find(UNITS, request)
        if system is None:
            raise ValueError("metric or imperial? the request does not say")
        return "10 km is 6.2 miles" if system == "imperial" else "10 km is 10 kilometres"

    def generic(name: str, description: str) -> BaseTool:
        return StructuredTool.from_function(lambda request: f"{name} done", name=name, description=description)

    return [
        StructuredTool.from_function(
            get_weather, description="Weather forecast for tomorrow in a city, e.g. whether an umbrella is needed"
        ),
        StructuredTool.from_function(order_drink, description="Order a coffee or another morning drink from the cafe"),
        StructuredTool.from_function(
            convert_units, description="Convert a distance between metric and imperial measurement units"
        ),
        generic("search_web", "Search the web for a query and return the top results"),
        generic("send_email", "Send an email to a contact"),
        generic("book_flight", "Book a flight between two airports on a date"),
        generic("set_timer", "Set a countdown timer for a number of minutes"),
        generic("translate_text", "Translate text into another language"),
    ]


TOOL_MARKERS = {
    "get_weather": "Forecast for",
    "order_drink": "Ordered a",
    "convert_units": "10 km is",
    "set_timer": "set_timer done",
}
SKILL_MARKERS = {s.name: s.body.split("Marker:", 1)[1].strip() for s in SKILLS}


@dataclass(slots=True)
class SimUser:
    id: str
    facts: dict[str, Fact]
    small_talk: list[str]
    stale: dict[str, Fact] = field(default_factory=dict)

    def intro(self) -> list[str]:
        """What the user has told the agent before the demo starts: facts and small talk, shuffled."""
        return [f.text for f in self.facts.values()] + list(self.small_talk)


class World:
    """Seeded users and the task stream. ``drift_at`` is the episode index where users drift."""

    def __init__(self, *, seed: int = 0, n_users: int = 10, episodes: int = 500) -> None:
        self.seed = seed
        self.episodes = episodes
        self.drift_at = episodes // 2
        rng = random.Random(seed)
        self.users = [self._make_user(rng, i) for i in range(n_users)]
        self._rng = random.Random(seed + 1)

    @staticmethod
    def _make_user(rng: random.Random, i: int) -> SimUser:
        job, employer = rng.choice(JOBS)
        city, coffee = rng.choice(CITIES), rng.choice(COFFEES)
        # drawn in the order the seeded worlds have always drawn them
        d, a, u, g = rng.choice(DIETS), rng.choice(ALLERGENS), rng.choice(UNITS), rng.choice(DOGS)
        facts = {
            "name": Fact("name", f"My name is {NAMES[i % len(NAMES)]}", NAMES[i % len(NAMES)]),
            "diet": Fact("diet", f"I follow a {d} diet", d),
            "allergy": Fact("allergy", f"I am allergic to {a}", a),
            "city": Fact("city", f"I live in {city}", city),
            "coffee": Fact("coffee", f"I take my coffee as a {coffee}", coffee),
            "work": Fact("work", f"I work as a {job} at {employer}", job),
            "units": Fact("units", f"I use {u} units for distances", u),
            "dog": Fact("dog", f"My dog is called {g}", g),
        }
        return SimUser(f"user-{i:02d}", facts, rng.sample(SMALL_TALK, 8))

    def drift(self, user: SimUser) -> list[str]:
        """The user moves and changes their coffee; returns what they tell the agent."""
        rng = random.Random(f"{self.seed}-{user.id}-drift")
        old_city, old_coffee = user.facts["city"], user.facts["coffee"]
        city = rng.choice([c for c in CITIES if c != old_city.value])
        coffee = rng.choice([c for c in COFFEES if c != old_coffee.value])
        user.stale = {"city": old_city, "coffee": old_coffee}
        user.facts["city"] = Fact("city", f"I moved to {city} last month", city)
        user.facts["coffee"] = Fact("coffee", f"These days I take my coffee as a {coffee}", coffee)
        return [user.facts["city"].text + ".", user.facts["coffee"].text + "."]

    def next_task(self, index: int) -> tuple[SimUser, Task, str]:
        mix = _MIX_BEFORE if index < self.drift_at else _MIX_AFTER
        names = list(mix)
        name = self._rng.choices(names, weights=[mix[n] for n in names])[0]
        task = next(t for t in TASKS if t.name == name)
        return self._rng.choice(self.users), task, self._rng.choice(task.queries)


def judge(user: SimUser, task: Task, answer: str) -> tuple[float, list[Fact]]:
    """The user's verdict: share of the task's needs met (-0.5 when a stale fact misled), and the
    facts the answer missed (the user will restate the first one)."""
    lowered = answer.lower()
    needs, met, missed = 0, 0, []
    misleading = False
    for category in task.facts:
        needs += 1
        fact = user.facts[category]
        if fact.value.lower() in lowered:
            met += 1
        else:
            missed.append(fact)
        stale = user.stale.get(category)
        if stale is not None and stale.value.lower() in lowered:
            misleading = True
    if task.tool is not None:
        needs += 1
        met += TOOL_MARKERS[task.tool].lower() in lowered
    if task.skill is not None:
        needs += 1
        met += SKILL_MARKERS[task.skill].lower() in lowered
    if misleading:
        return -0.5, missed
    return met / needs, missed
