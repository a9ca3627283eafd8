"""A deterministic English -> French parallel corpus for the embedded demo.

Everything here is generated from a small hand-written lexicon with the standard library
only, so the demo needs no download and is the same on every machine. The language is
deliberately regular (a few hundred word types) so that a small Transformer can learn it in
minutes, yet it is compositional rather than a lookup table: numbers up to 999 999 spelled out
in both languages (traditional French spelling), gender and number agreement of numbers,
adjectives and past participles, adjective placement, elision (j'ai, l'ordinateur) and
irregular plurals (chevaux, mice).

Every English sentence has exactly one French translation ("you" is always "vous", "they"
always "ils"), so the reference translation is never ambiguous.
"""

from __future__ import annotations

import calendar
import os
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from seq2seq.files import atomic_write_text

Pair = tuple[str, str]
_T = TypeVar("_T")

# --------------------------------------------------------------------------- numbers

_EN_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_EN_IRREGULAR_ORDINALS = {
    1: "first",
    2: "second",
    3: "third",
    5: "fifth",
    8: "eighth",
    9: "ninth",
    12: "twelfth",
}

_FR_SMALL = (
    "zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze seize"
).split()
_FR_TENS = {2: "vingt", 3: "trente", 4: "quarante", 5: "cinquante", 6: "soixante"}


def _check_int(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def _en_below_100(n: int) -> str:
    if n < 20:
        return _EN_SMALL[n]
    tens, unit = divmod(n, 10)
    return _EN_TENS[tens] if unit == 0 else f"{_EN_TENS[tens]}-{_EN_SMALL[unit]}"


def _en_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    if hundreds == 0:
        return _en_below_100(rest)
    head = f"{_EN_SMALL[hundreds]} hundred"
    return head if rest == 0 else f"{head} and {_en_below_100(rest)}"


def english_number(n: int) -> str:
    """Spell 0 <= n < 1 000 000 in British English ("three hundred and seventy-one")."""
    _check_int("n", n, 0, 999_999)
    thousands, rest = divmod(n, 1000)
    if thousands == 0:
        return _en_below_1000(rest)
    head = f"{_en_below_1000(thousands)} thousand"
    if rest == 0:
        return head
    # British usage keeps "and" before a bare tens/units part: "one thousand and five".
    joiner = " and " if rest < 100 else " "
    return head + joiner + _en_below_1000(rest)


def english_ordinal(n: int) -> str:
    """Spell the ordinal of 1 <= n <= 99 ("first", "twelfth", "twenty-first", "thirtieth")."""
    _check_int("n", n, 1, 99)
    if n < 20:
        return _EN_IRREGULAR_ORDINALS.get(n, _EN_SMALL[n] + "th")
    tens, unit = divmod(n, 10)
    if unit == 0:
        return _EN_TENS[tens][:-1] + "ieth"
    return f"{_EN_TENS[tens]}-{english_ordinal(unit)}"


def _fr_below_100(n: int, final: bool) -> str:
    # `final`: nothing follows, so "quatre-vingts" keeps its plural s (lost before "mille").
    if n <= 16:
        return _FR_SMALL[n]
    if n < 20:
        return "dix-" + _FR_SMALL[n - 10]
    tens, unit = divmod(n, 10)
    if tens <= 6:
        if unit == 0:
            return _FR_TENS[tens]
        joiner = " et " if unit == 1 else "-"
        return _FR_TENS[tens] + joiner + _FR_SMALL[unit]
    if tens == 7:  # 70-79 count on from sixty: soixante-dix, soixante et onze, ...
        joiner = " et " if n == 71 else "-"
        return "soixante" + joiner + _fr_below_100(n - 60, final)
    if n == 80:
        return "quatre-vingts" if final else "quatre-vingt"
    return "quatre-vingt-" + _fr_below_100(n - 80, final)


def _fr_below_1000(n: int, final: bool) -> str:
    hundreds, rest = divmod(n, 100)
    if hundreds == 0:
        return _fr_below_100(rest, final)
    head = "cent" if hundreds == 1 else f"{_FR_SMALL[hundreds]} cent"
    if rest == 0:
        # Like "vingts", "cents" is plural only when multiplied and ending the number.
        return head + "s" if hundreds > 1 and final else head
    return f"{head} {_fr_below_100(rest, final)}"


def _fr_spell(n: int, final: bool) -> str:
    thousands, rest = divmod(n, 1000)
    if thousands == 0:
        return _fr_below_1000(rest, final)
    head = "mille" if thousands == 1 else f"{_fr_below_1000(thousands, final=False)} mille"
    return head if rest == 0 else f"{head} {_fr_below_1000(rest, final)}"


def french_number(n: int, feminine: bool = False) -> str:
    """Spell 0 <= n < 1 000 000 in French, traditional spelling ("trois cent soixante et onze")."""
    _check_int("n", n, 0, 999_999)
    words = _fr_spell(n, final=True)
    # Only the last unit agrees with a feminine noun: "vingt et une", but "vingt et un mille".
    if feminine and (words == "un" or words.endswith((" un", "-un"))):
        words += "e"
    return words


def english_year(year: int) -> str:
    """Spell a year 1900..2099 the way it is read ("nineteen oh five", "two thousand and one")."""
    _check_int("year", year, 1900, 2099)
    if year >= 2000:
        return english_number(year)
    rest = year - 1900
    if rest == 0:
        return "nineteen hundred"
    if rest < 10:
        return f"nineteen oh {_EN_SMALL[rest]}"
    return f"nineteen {_en_below_100(rest)}"


def french_year(year: int) -> str:
    """Spell a year 1900..2099 in French ("mille neuf cent", "mille neuf cent quatre-vingt")."""
    _check_int("year", year, 1900, 2099)
    # A year is an ordinal use of the number, so vingt and cent stay invariable ("l'an 1900").
    return _fr_spell(year, final=False)


# --------------------------------------------------------------------------- lexicon

# Person keys index the six-form present-tense tables: je, tu, il/elle, nous, vous, ils/elles.
_PERSONS = ("1s", "2s", "3s", "1p", "2p", "3p")


@dataclass(frozen=True)
class Subject:
    """A sentence subject: English and French forms, grammatical person and gender."""

    en: str
    fr: str
    person: str
    feminine: bool = False

    @property
    def plural(self) -> bool:
        # "vous" is polite singular here, so "Vous êtes né" (one fixed translation).
        return self.person in ("1p", "3p")


@dataclass(frozen=True)
class Verb:
    """A verb with English base/third-person forms and the French present tense."""

    en: str
    en_3s: str
    fr: tuple[str, str, str, str, str, str]

    def english(self, subject: Subject) -> str:
        return self.en_3s if subject.person == "3s" else self.en

    def french(self, subject: Subject) -> str:
        return self.fr[_PERSONS.index(subject.person)]


@dataclass(frozen=True)
class Noun:
    """A countable noun; `tradable` is False for nouns one should not buy or sell."""

    en_sg: str
    en_pl: str
    fr_sg: str
    fr_pl: str
    feminine: bool
    tradable: bool = True


@dataclass(frozen=True)
class Adjective:
    """An adjective with its four French forms; size adjectives go before the noun."""

    en: str
    fr_forms: tuple[str, str, str, str]  # masc. sg, fem. sg, masc. pl, fem. pl
    before_noun: bool = False

    def french(self, feminine: bool, plural: bool) -> str:
        return self.fr_forms[2 * plural + feminine]


def _adjective(en: str, masc: str, fem: str | None = None, before_noun: bool = False) -> Adjective:
    if fem is None:
        fem = masc if masc.endswith("e") else masc + "e"
    return Adjective(en, (masc, fem, masc + "s", fem + "s"), before_noun)


SUBJECTS: dict[str, Subject] = {
    s.en: s
    for s in (
        Subject("I", "je", "1s"),
        Subject("you", "vous", "2p"),
        Subject("he", "il", "3s"),
        Subject("she", "elle", "3s", feminine=True),
        Subject("we", "nous", "1p"),
        Subject("they", "ils", "3p"),
        Subject("my brother", "mon frère", "3s"),
        Subject("my sister", "ma sœur", "3s", feminine=True),
        Subject("the teacher", "le professeur", "3s"),
        Subject("Marie", "Marie", "3s", feminine=True),
        Subject("my parents", "mes parents", "3p"),
        Subject("my sisters", "mes sœurs", "3p", feminine=True),
    )
}

VERBS: dict[str, Verb] = {
    v.en: v
    for v in (
        Verb("have", "has", ("ai", "as", "a", "avons", "avez", "ont")),
        Verb("see", "sees", ("vois", "vois", "voit", "voyons", "voyez", "voient")),
        Verb("buy", "buys", ("achète", "achètes", "achète", "achetons", "achetez", "achètent")),
        Verb("want", "wants", ("veux", "veux", "veut", "voulons", "voulez", "veulent")),
        Verb("sell", "sells", ("vends", "vends", "vend", "vendons", "vendez", "vendent")),
    )
}
_TRADE_VERBS = ("buy", "sell")
_ETRE = Verb("be", "is", ("suis", "es", "est", "sommes", "êtes", "sont"))
_AVOIR = VERBS["have"]

NOUNS: dict[str, Noun] = {
    n.en_sg: n
    for n in (
        Noun("cat", "cats", "chat", "chats", False),
        Noun("dog", "dogs", "chien", "chiens", False),
        Noun("horse", "horses", "cheval", "chevaux", False),
        Noun("bird", "birds", "oiseau", "oiseaux", False),
        Noun("mouse", "mice", "souris", "souris", True),
        Noun("child", "children", "enfant", "enfants", False, tradable=False),
        Noun("apple", "apples", "pomme", "pommes", True),
        Noun("egg", "eggs", "œuf", "œufs", False),
        Noun("flower", "flowers", "fleur", "fleurs", True),
        Noun("tree", "trees", "arbre", "arbres", False),
        Noun("book", "books", "livre", "livres", False),
        Noun("car", "cars", "voiture", "voitures", True),
        Noun("house", "houses", "maison", "maisons", True),
        Noun("chair", "chairs", "chaise", "chaises", True),
        Noun("box", "boxes", "boîte", "boîtes", True),
        Noun("key", "keys", "clé", "clés", True),
    )
}

ADJECTIVES: dict[str, Adjective] = {
    a.en: a
    for a in (
        _adjective("small", "petit", before_noun=True),
        _adjective("big", "grand", before_noun=True),
        _adjective("red", "rouge"),
        _adjective("black", "noir"),
        _adjective("white", "blanc", "blanche"),
        _adjective("green", "vert"),
        _adjective("blue", "bleu"),
        _adjective("yellow", "jaune"),
    )
}
_SIZES = tuple(a.en for a in ADJECTIVES.values() if a.before_noun)
_COLOURS = tuple(a.en for a in ADJECTIVES.values() if not a.before_noun)

# English place phrase -> French place phrase, for "There are ... in the garden."
PLACES: dict[str, str] = {
    "garden": "le jardin",
    "kitchen": "la cuisine",
    "street": "la rue",
    "park": "le parc",
    "school": "l'école",
    "hotel": "l'hôtel",
}

# English item -> (French noun with its article, already elided where needed).
PRICED_ITEMS: dict[str, str] = {
    "book": "le livre",
    "lamp": "la lampe",
    "computer": "l'ordinateur",
    "ticket": "le billet",
    "bag": "le sac",
    "shirt": "la chemise",
    "clock": "l'horloge",
    "umbrella": "le parapluie",
    "watch": "la montre",
    "bicycle": "le vélo",
    "newspaper": "le journal",
}

# Things whose age we state, with a plausible maximum age; people use the subject table.
AGED_THINGS: dict[str, tuple[Subject, int]] = {
    s.en: (s, max_age)
    for s, max_age in (
        (Subject("the house", "la maison", "3s", feminine=True), 500),
        (Subject("the tree", "l'arbre", "3s"), 900),
        (Subject("the car", "la voiture", "3s", feminine=True), 80),
        (Subject("the church", "l'église", "3s", feminine=True), 999),
        (Subject("the bridge", "le pont", "3s"), 800),
        (Subject("the castle", "le château", "3s"), 999),
    )
}
_PERSON_MAX_AGE = 100

MONTHS_EN = (
    "January February March April May June July August September October November December"
).split()
MONTHS_FR = (
    "janvier février mars avril mai juin juillet août septembre octobre novembre décembre"
).split()
WEEKDAYS_EN = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
WEEKDAYS_FR = "lundi mardi mercredi jeudi vendredi samedi dimanche".split()

# English minutes past/to the hour; 15 and 30 have their own French idioms.
_EN_MINUTES = {5: "five", 10: "ten", 15: "a quarter", 20: "twenty", 25: "twenty-five", 30: "half"}

# --------------------------------------------------------------------------- sentence helpers

# The lexicon only holds mute-h words (horloge, hôtel), so every h allows elision.
_ELIDING_INITIALS = frozenset("aeiouàâäéèêëîïôöùûüœh")


def _join_elided(word: str, following: str) -> str:
    """Join `word following`, eliding je/le/la before a vowel or mute h (j'ai, l'arbre)."""
    if word.lower() in ("je", "le", "la") and following[:1].lower() in _ELIDING_INITIALS:
        return f"{word[0]}'{following}"
    return f"{word} {following}"


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def _lookup(table: Mapping[str, _T], key: str, what: str) -> _T:
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"unknown {what} {key!r}; known: {', '.join(map(str, table))}") from None


def _noun_phrases(n: int, noun: str, size: str | None, colour: str | None) -> Pair:
    """English and French "<number> [size] <noun> [colour]" with full agreement."""
    _check_int("n", n, 1, 999_999)
    entry: Noun = _lookup(NOUNS, noun, "noun")
    adjectives = [_lookup(ADJECTIVES, a, "adjective") for a in (size, colour) if a is not None]
    if size is not None and not adjectives[0].before_noun:
        raise ValueError(f"{size!r} is not a size adjective; use one of {_SIZES}")
    if colour is not None and adjectives[-1].before_noun:
        raise ValueError(f"{colour!r} is not a colour; use one of {_COLOURS}")
    plural = n > 1
    english = [english_number(n), *(a.en for a in adjectives)]
    english.append(entry.en_pl if plural else entry.en_sg)
    french = [french_number(n, feminine=entry.feminine)]
    french += [a.french(entry.feminine, plural) for a in adjectives if a.before_noun]
    french.append(entry.fr_pl if plural else entry.fr_sg)
    french += [a.french(entry.feminine, plural) for a in adjectives if not a.before_noun]
    return " ".join(english), " ".join(french)


# --------------------------------------------------------------------------- templates


def counting_pair(
    subject: str,
    verb: str,
    n: int,
    noun: str,
    *,
    size: str | None = None,
    colour: str | None = None,
) -> Pair:
    """Counting: I have 371 cats -> J'ai trois cent soixante et onze chats (full agreement)."""
    subj: Subject = _lookup(SUBJECTS, subject, "subject")
    vrb: Verb = _lookup(VERBS, verb, "verb")
    en_np, fr_np = _noun_phrases(n, noun, size, colour)
    english = f"{subj.en} {vrb.english(subj)} {en_np}"
    french = f"{_join_elided(subj.fr, vrb.french(subj))} {fr_np}"
    return _sentence(english), _sentence(french)


def there_is_pair(
    n: int, noun: str, place: str, *, size: str | None = None, colour: str | None = None
) -> Pair:
    """Existence: There are two red apples in the garden -> Il y a deux pommes rouges ..."""
    fr_place = _lookup(PLACES, place, "place")
    en_np, fr_np = _noun_phrases(n, noun, size, colour)
    verb = "is" if n == 1 else "are"
    return (
        _sentence(f"there {verb} {en_np} in the {place}"),
        _sentence(f"il y a {fr_np} dans {fr_place}"),
    )


def _check_date(day: int, month: int, year: int) -> None:
    _check_int("month", month, 1, 12)
    _check_int("day", day, 1, calendar.monthrange(year, month)[1])


def _french_day(day: int) -> str:
    # French dates use the ordinal only for the first day: "le premier mai", "le deux mai".
    return "premier" if day == 1 else french_number(day)


def _date(day: int, month: int, year: int | None) -> Pair:
    """A date as said: the first of May nineteen eighty -> le premier mai mille neuf cent ..."""
    _check_date(day, month, 2000 if year is None else year)
    english = f"the {english_ordinal(day)} of {MONTHS_EN[month - 1]}"
    french = f"le {_french_day(day)} {MONTHS_FR[month - 1]}"
    if year is None:
        return english, french
    return f"{english} {english_year(year)}", f"{french} {french_year(year)}"


def birth_pair(subject: str, day: int, month: int, year: int) -> Pair:
    """Birth date: She was born on the first of May ... -> Elle est née le premier mai ..."""
    subj: Subject = _lookup(SUBJECTS, subject, "subject")
    _check_int("year", year, 1900, 2099)
    en_date, fr_date = _date(day, month, year)
    en_be = "was" if subj.person in ("1s", "3s") else "were"
    participle = "né" + ("e" if subj.feminine else "") + ("s" if subj.plural else "")
    english = f"{subj.en} {en_be} born on {en_date}"
    french = f"{subj.fr} {_ETRE.french(subj)} {participle} {fr_date}"
    return _sentence(english), _sentence(french)


def meeting_pair(weekday: int, day: int, month: int) -> Pair:
    """Meeting: The meeting is on Monday, the first of March -> La réunion a lieu le lundi ..."""
    _check_int("weekday", weekday, 0, 6)
    _check_date(day, month, 2000)  # a leap year, so the 29th of February is allowed
    english = (
        f"the meeting is on {WEEKDAYS_EN[weekday]}, the {english_ordinal(day)} "
        f"of {MONTHS_EN[month - 1]}"
    )
    french = (
        f"la réunion a lieu le {WEEKDAYS_FR[weekday]} {_french_day(day)} {MONTHS_FR[month - 1]}"
    )
    return _sentence(english), _sentence(french)


def _amount(n: int, en_unit: str, fr_unit: str) -> Pair:
    # "un euro", "un centime": the currency is masculine whatever the item's gender.
    plural = "s" if n > 1 else ""
    return f"{english_number(n)} {en_unit}{plural}", f"{french_number(n)} {fr_unit}{plural}"


def _price(euros: int, cents: int) -> Pair:
    """A price in words: one euro and five cents -> un euro et cinq centimes."""
    _check_int("euros", euros, 1, 999_999)
    _check_int("cents", cents, 0, 99)
    en_price, fr_price = _amount(euros, "euro", "euro")
    if cents:
        en_cents, fr_cents = _amount(cents, "cent", "centime")
        en_price, fr_price = f"{en_price} and {en_cents}", f"{fr_price} et {fr_cents}"
    return en_price, fr_price


def price_pair(item: str, euros: int, cents: int = 0) -> Pair:
    """Price in words: The lamp costs one euro and five cents -> La lampe coûte un euro et ..."""
    fr_item = _lookup(PRICED_ITEMS, item, "item")
    en_price, fr_price = _price(euros, cents)
    return _sentence(f"the {item} costs {en_price}"), _sentence(f"{fr_item} coûte {fr_price}")


def price_digits_pair(item: str, euros: int, cents: int) -> Pair:
    """Price in digits: The ticket costs 12.50 euros -> Le billet coûte 12,50 euros."""
    fr_item = _lookup(PRICED_ITEMS, item, "item")
    # From 2 up so both languages agree on the plural ("1,50 euro" is singular in French).
    _check_int("euros", euros, 2, 999)
    _check_int("cents", cents, 0, 99)
    return (
        _sentence(f"the {item} costs {euros}.{cents:02d} euros"),
        _sentence(f"{fr_item} coûte {euros},{cents:02d} euros"),
    )


def _french_hour(hour: int) -> str:
    return "une heure" if hour == 1 else f"{french_number(hour)} heures"


def _clock(hour: int, minute: int) -> Pair:
    """A clock time as said: (3, 30) -> half past three, trois heures et demie."""
    _check_int("hour", hour, 0, 12)
    _check_int("minute", minute, 0, 55)
    if minute % 5:
        raise ValueError(f"minute must be a multiple of 5, got {minute}")
    if minute == 0 and hour in (0, 12):
        return ("noon", "midi") if hour == 12 else ("midnight", "minuit")
    # Both languages name the coming hour after the half: 8:45 is "a quarter to nine".
    named = hour if minute <= 30 else hour + 1
    if not 1 <= named <= 11:
        raise ValueError(f"{hour}:{minute:02d} is outside the 1..11 o'clock range of the demo")
    en_hour, fr_hour = english_number(named), _french_hour(named)
    if minute == 0:
        return f"{en_hour} o'clock", fr_hour
    if minute <= 30:
        fr_minutes = {15: "et quart", 30: "et demie"}.get(minute, french_number(minute))
        return f"{_EN_MINUTES[minute]} past {en_hour}", f"{fr_hour} {fr_minutes}"
    before = 60 - minute
    fr_minutes = "le quart" if before == 15 else french_number(before)
    return f"{_EN_MINUTES[before]} to {en_hour}", f"{fr_hour} moins {fr_minutes}"


def time_pair(hour: int, minute: int = 0) -> Pair:
    """Clock time hour:minute, minute a multiple of 5: (3, 30) -> It is half past three."""
    english, french = _clock(hour, minute)
    return _sentence(f"it is {english}"), _sentence(f"il est {french}")


def bare_pair(kind: str, *args: int) -> Pair:
    """What a user types without a sentence around it: a number, a date, a price or a time.

    bare_pair("number", 371) -> ("three hundred and seventy-one", "trois cent soixante et onze");
    "date" takes (day, month[, year]), "price" (euros, cents), "time" (hour, minute).
    """
    if kind == "number":
        (n,) = args
        return english_number(n), french_number(n)
    if kind == "date":
        day, month, *year = args
        return _date(day, month, year[0] if year else None)
    if kind == "price":
        return _price(*args)
    if kind == "time":
        return _clock(*args)
    raise ValueError(f"unknown kind {kind!r}; choose from number, date, price, time")


def age_pair(subject: str, years: int) -> Pair:
    """Age: My sister is twenty-one years old -> Ma sœur a vingt et un ans."""
    if subject in AGED_THINGS:
        subj, max_age = AGED_THINGS[subject]
    else:
        subj, max_age = _lookup(SUBJECTS, subject, "subject"), _PERSON_MAX_AGE
    _check_int("years", years, 1, max_age)
    en_be = {"1s": "am", "3s": "is"}.get(subj.person, "are")
    en_years = "one year" if years == 1 else f"{english_number(years)} years"
    fr_years = "un an" if years == 1 else f"{french_number(years)} ans"
    return (
        _sentence(f"{subj.en} {en_be} {en_years} old"),
        _sentence(f"{_join_elided(subj.fr, _AVOIR.french(subj))} {fr_years}"),
    )


# --------------------------------------------------------------------------- sampling


def _below_1000(rng: random.Random) -> int:
    # Favour small and round values so every spelling rule is seen often, not just 1/1000.
    r = rng.random()
    if r < 0.45:
        return rng.randint(1, 99)
    if r < 0.60:
        return rng.randint(1, 9) * 100
    return rng.randint(100, 999)


def _count(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.12:
        return 1  # singular agreement needs plenty of examples
    if r < 0.40:
        return rng.randint(2, 99)
    if r < 0.65:
        return rng.randint(1, 9) * 100 if rng.random() < 0.2 else rng.randint(100, 999)
    thousands = _below_1000(rng)
    r = rng.random()
    rest = 0 if r < 0.25 else rng.randint(1, 99) if r < 0.5 else rng.randint(100, 999)
    return thousands * 1000 + rest


def _optional(rng: random.Random, choices: tuple[str, ...]) -> str | None:
    return rng.choice(choices) if rng.random() < 0.5 else None


def _sample_counting(rng: random.Random) -> Pair:
    subject = rng.choice(list(SUBJECTS))
    verb = rng.choice(list(VERBS))
    nouns = [n for n, e in NOUNS.items() if e.tradable or verb not in _TRADE_VERBS]
    noun = rng.choice(nouns)
    n = _count(rng)  # drawn before the size and colour: the corpus a seed gives stays the same
    size, colour = _optional(rng, _SIZES), _optional(rng, _COLOURS)
    return counting_pair(subject, verb, n, noun, size=size, colour=colour)


def _sample_there_is(rng: random.Random) -> Pair:
    noun = rng.choice(list(NOUNS))
    place = rng.choice(list(PLACES))
    n = _count(rng)
    size, colour = _optional(rng, _SIZES), _optional(rng, _COLOURS)
    return there_is_pair(n, noun, place, size=size, colour=colour)


def _sample_birth(rng: random.Random) -> Pair:
    year = rng.randint(1900, 2099)
    month = rng.randint(1, 12)
    day = rng.randint(1, calendar.monthrange(year, month)[1])
    return birth_pair(rng.choice(list(SUBJECTS)), day, month, year)


def _sample_meeting(rng: random.Random) -> Pair:
    month = rng.randint(1, 12)
    day = rng.randint(1, calendar.monthrange(2000, month)[1])
    return meeting_pair(rng.randint(0, 6), day, month)


def _sample_price(rng: random.Random) -> Pair:
    item = rng.choice(list(PRICED_ITEMS))
    r = rng.random()
    if r < 0.2:
        euros = rng.randint(2, 99) if rng.random() < 0.7 else rng.randint(100, 999)
        return price_digits_pair(item, euros, rng.randint(0, 99))
    r = rng.random()
    if r < 0.15:
        euros = 1
    elif r < 0.7:
        euros = rng.randint(2, 99)
    elif r < 0.9:
        euros = rng.randint(100, 999)
    else:
        euros = rng.randint(1000, 9999)
    cents = rng.randint(1, 99) if rng.random() < 0.45 else 0
    return price_pair(item, euros, cents)


def _sample_time(rng: random.Random) -> Pair:
    r = rng.random()
    if r < 0.04:
        return time_pair(12)
    if r < 0.08:
        return time_pair(0)
    named = rng.randint(1, 11)
    minute = rng.randrange(0, 60, 5)
    return time_pair(named if minute <= 30 else named - 1, minute)


def _sample_age(rng: random.Random) -> Pair:
    subject = rng.choice(list(SUBJECTS) + list(AGED_THINGS))
    max_age = AGED_THINGS[subject][1] if subject in AGED_THINGS else _PERSON_MAX_AGE
    years = 1 if rng.random() < 0.1 else rng.randint(2, max_age)
    return age_pair(subject, years)


def _sample_bare(rng: random.Random) -> Pair:
    r = rng.random()
    if r < 0.4:
        english, french = bare_pair("number", _count(rng))
    elif r < 0.6:
        month = rng.randint(1, 12)
        day = rng.randint(1, calendar.monthrange(2000, month)[1])
        year = [rng.randint(1900, 2099)] if rng.random() < 0.6 else []
        if year and not calendar.isleap(year[0]) and (day, month) == (29, 2):
            day = 28
        english, french = bare_pair("date", day, month, *year)
    elif r < 0.85:
        cents = rng.randint(1, 99) if rng.random() < 0.45 else 0
        english, french = bare_pair("price", rng.randint(1, 999), cents)
    else:
        minute = rng.randrange(0, 60, 5)
        named = rng.randint(1, 11)
        english, french = bare_pair("time", named if minute <= 30 else named - 1, minute)
    # Typed either way; both sides follow the same convention.
    if rng.random() < 0.5:
        return english[0].upper() + english[1:], french[0].upper() + french[1:]
    return english, french


# (sampler, weight): counting gets more weight as it carries most of the grammar.
_TEMPLATES: tuple[tuple[Callable[[random.Random], Pair], float], ...] = (
    (_sample_counting, 2.0),
    (_sample_there_is, 1.0),
    (_sample_birth, 1.0),
    (_sample_meeting, 0.6),
    (_sample_price, 1.4),
    (_sample_time, 0.8),
    (_sample_age, 1.0),
    (_sample_bare, 1.0),
)


def _iter_pairs(rng: random.Random) -> Iterator[Pair]:
    samplers = [sampler for sampler, _ in _TEMPLATES]
    weights = [weight for _, weight in _TEMPLATES]
    while True:
        yield rng.choices(samplers, weights)[0](rng)


def generate_pairs(n: int, seed: int) -> list[Pair]:
    """Return n (english, french) pairs drawn with random.Random(seed); may repeat sentences."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    stream = _iter_pairs(random.Random(seed))
    return [next(stream) for _ in range(n)]


# --------------------------------------------------------------------------- corpus files


def _draw_splits(sizes: dict[str, int], seed: int) -> dict[str, list[Pair]]:
    """Fill the splits in order from one stream.

    The training split keeps the generator's distribution, repeats included: small templates
    (clock times have ~130 sentences) would otherwise appear once each and stay unlearned.
    Held-out splits hold only sentences unseen before them, so they measure generalisation.
    """
    stream = _iter_pairs(random.Random(seed))
    seen: set[str] = set()
    # Small templates (clock times) run out quickly; the cap turns an impossible request
    # (more sentences than the grammar can produce) into an error instead of a hang.
    draws_left = 20 * sum(sizes.values()) + 10_000
    splits: dict[str, list[Pair]] = {}
    for name, size in sizes.items():
        pairs: list[Pair] = []
        if name == "train":
            pairs = [next(stream) for _ in range(size)]
            seen.update(english for english, _ in pairs)
            splits[name] = pairs
            continue
        while len(pairs) < size:
            if draws_left == 0:
                raise ValueError(f"could not draw {size} distinct sentences for {name!r}")
            draws_left -= 1
            pair = next(stream)
            if pair[0] not in seen:
                seen.add(pair[0])
                pairs.append(pair)
        splits[name] = pairs
    return splits


def write_demo_corpus(
    out_dir: str | os.PathLike[str],
    *,
    n_train: int = 40000,
    n_valid: int = 500,
    n_test: int = 1000,
    seed: int = 1234,
) -> dict[str, int]:
    """Write train/valid/test .en/.fr files to out_dir; return the number of pairs per split."""
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    for name, size in sizes.items():
        _check_int(f"n_{name}", size, 0, 10_000_000)
    splits = _draw_splits(sizes, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, pairs in splits.items():
        for lang, column in (("en", 0), ("fr", 1)):
            text = "".join(pair[column] + "\n" for pair in pairs)
            atomic_write_text(out / f"{name}.{lang}", text)
    return {name: len(pairs) for name, pairs in splits.items()}
