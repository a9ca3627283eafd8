"""French repair table for placed terms: determiners by gender and number, elision, contractions
and the suffix rules that inflect an adjective or participle. Only data and small pure lookups:
term_repair.py applies them."""

from __future__ import annotations

# A determiner family's forms: (masculine, feminine, plural, masculine before a vowel,
# feminine before a vowel). "le" → "l'" before a vowel, "ma" → "mon", "ce" → "cet".
FAMILIES: dict[str, tuple[str, str, str, str, str]] = {
    "le": ("le", "la", "les", "l'", "l'"),
    "un": ("un", "une", "des", "un", "une"),
    "ce": ("ce", "cette", "ces", "cet", "cette"),
    "mon": ("mon", "ma", "mes", "mon", "mon"),
    "ton": ("ton", "ta", "tes", "ton", "ton"),
    "son": ("son", "sa", "ses", "son", "son"),
    "notre": ("notre", "notre", "nos", "notre", "notre"),
    "votre": ("votre", "votre", "vos", "votre", "votre"),
    "leur": ("leur", "leur", "leurs", "leur", "leur"),
    "aucun": ("aucun", "aucune", "aucuns", "aucun", "aucune"),
    "quel": ("quel", "quelle", "quels", "quel", "quelle"),
    "chaque": ("chaque", "chaque", "chaque", "chaque", "chaque"),
    "nouveau": ("nouveau", "nouvelle", "nouveaux", "nouvel", "nouvelle"),
}

# Each written form → (family, gender or None when the form does not say, number or None).
FORMS: dict[str, tuple[str, str | None, str | None]] = {}
for _family, (_m, _f, _pl, _mv, _fv) in FAMILIES.items():
    for _form, _gender, _number in (
        (_pl, None, "pl"),
        (_mv, "m", "sg"),
        (_fv, "f", "sg"),
        (_f, "f", "sg"),
        (_m, "m", "sg"),
    ):
        _known = FORMS.get(_form)
        # A form two genders share ("notre", "l'") says neither.
        FORMS[_form] = (_family, None if _known and _known[1] != _gender else _gender, _number)
FORMS["l'"] = ("le", None, "sg")

# Preposition + article written as one word, and back.
CONTRACTED = {("de", "le"): "du", ("de", "les"): "des", ("à", "le"): "au", ("à", "les"): "aux"}
EXPANDED = {"du": ("de", "le"), "au": ("à", "le"), "aux": ("à", "les")}
# "des" is "de les" or the plural of "un": term_repair asks the model which.
AMBIGUOUS = {"des": (("de", "le"), (None, "un"))}

# Words written elided before a vowel: full form → elided form.
ELIDED = {"de": "d'", "que": "qu'", "jusque": "jusqu'", "lorsque": "lorsqu'", "puisque": "puisqu'"}

VOWELS = set("aeiouyàâäéèêëîïôöùûüœæAEIOUYÀÂÄÉÈÊËÎÏÔÖÙÛÜŒÆ")
# Common nouns whose "h" is aspirated: no elision before them ("le héros", "la hache").
H_ASPIRATED = frozenset(
    "hache haie haine hall hamac hameau hanche handicap hangar hardware hareng haricot harpe "
    "hasard hausse haut hauteur héros hibou hiérarchie homard honte hors housse hublot huit "
    "hurlement hutte".split()
)

# Words after a term that are never an agreeing adjective: the next few words are looked at
# only up to one of these.
FUNCTION_WORDS = frozenset(
    "à au aux avec ce ces cet cette dans de des du elle en est et il ils je la le les leur lui "
    "mais me ne ni nous on ou où par pas pour qu que qui sa se ses si son sont sur ta te tes ton "
    "tu un une vers vos votre vous y a ont être avoir été sera peut doit deux trois quatre cinq "
    "six sept huit neuf dix cent mille fois".split()
)

# Feminine of a masculine ending, longest ending first; "" is the default (+e).
FEMININE = (
    ("eux", "euse"),
    ("eur", "euse"),
    ("if", "ive"),
    ("el", "elle"),
    ("en", "enne"),
    ("on", "onne"),
    ("er", "ère"),
    ("et", "ette"),
    ("c", "que"),
    ("e", "e"),
    ("", "e"),
)
PLURAL = (("al", "aux"), ("eau", "eaux"), ("s", "s"), ("x", "x"), ("z", "z"), ("", "s"))


def starts_with_vowel(word: str) -> bool:
    """Whether a word elides the word before it: a vowel first, or a mute "h"."""
    if not word:
        return False
    if word[0] in "hH":
        lower = word.lower()
        return lower not in H_ASPIRATED and lower.removesuffix("s") not in H_ASPIRATED
    return word[0] in VOWELS


def feminine(masculine: str) -> str:
    """The feminine form of a masculine singular adjective or participle, by its ending."""
    for ending, replacement in FEMININE:
        if masculine.endswith(ending):
            return masculine[: len(masculine) - len(ending)] + replacement
    return masculine


def plural(singular: str) -> str:
    """The plural form of a singular noun or adjective, by its ending."""
    for ending, replacement in PLURAL:
        if singular.endswith(ending):
            return singular[: len(singular) - len(ending)] + replacement
    return singular


def bases(word: str) -> set[str]:
    """Masculine singular forms a written adjective may come from (its endings undone)."""
    singulars = {word}
    if word.endswith("aux"):
        singulars.add(word[:-3] + "al")
    if word.endswith(("s", "x")):
        singulars.add(word[:-1])
    found = set(singulars)
    for form in singulars:
        for ending, replacement in FEMININE:
            if replacement and ending != replacement and form.endswith(replacement):
                found.add(form[: len(form) - len(replacement)] + ending)
        if form.endswith("e"):
            found.add(form[:-1])
    return {b for b in found if len(b) >= 2}


def inflected(word: str, gender: str, number: str) -> set[str]:
    """The forms of `word` (an adjective or participle as written) of `gender` ('m'/'f') and
    `number` ('sg'/'pl'), by suffix rules: candidates, some of them not words."""
    out = set()
    for base in bases(word):
        form = feminine(base) if gender == "f" else base
        out.add(plural(form) if number == "pl" else form)
    return out
