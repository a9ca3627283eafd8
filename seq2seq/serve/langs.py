"""The languages a served model translates between, their names, and the language of a text
when a client says `auto` (the data package's offline language identifier)."""

from __future__ import annotations

from seq2seq.data.langid import identify
from seq2seq.errors import UserError
from seq2seq.serve.schema import RequestError

# ISO 639-1 names for the codes people serve; any other code is named by itself.
NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan",
    "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "gl": "Galician", "he": "Hebrew",
    "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian", "id": "Indonesian", "is": "Icelandic",
    "it": "Italian", "ja": "Japanese", "ka": "Georgian", "ko": "Korean", "lt": "Lithuanian",
    "lv": "Latvian", "mk": "Macedonian", "ms": "Malay", "mt": "Maltese", "nb": "Norwegian Bokmål",
    "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian",
    "sv": "Swedish", "sw": "Swahili", "th": "Thai", "tl": "Tagalog", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """A language's English name (`fr` → French; `fra_Latn` → French), else its code."""
    return NAMES.get(code.split("_")[0].split("-")[0].lower(), code)


def served_pairs(source: str, target: str, many: list[str] | None = None) -> list[tuple[str, str]]:
    """The (source, target) pairs a model serves: its one pair, or with a many-language
    model's codes (`many`), every ordered pair of two different ones."""
    if many:
        return [(a, b) for a in many for b in many if a != b]
    return [(source, target)]


def language_list(pairs: list[tuple[str, str]]) -> list[dict]:
    """LibreTranslate's /languages: each language with the targets it translates into (a
    language that is only ever a target has none)."""
    codes = sorted({code for pair in pairs for code in pair})
    return [
        {
            "code": code,
            "name": language_name(code),
            "targets": sorted(t for s, t in pairs if s == code),
        }
        for code in codes
    ]


def _matches(found: str, code: str) -> bool:
    """Whether an identified ISO 639-1 code names a served code (`fr` names `fr`, `fr-CA`
    and `fr_FR`; NLLB's three-letter `fra_Latn` is beyond it)."""
    code = code.lower()
    return code == found or code.split("_")[0].split("-")[0] == found


def detect(texts: list[str], candidates: list[str]) -> list[tuple[str, float]]:
    """Each text's language among `candidates` (codes a model reads) and the identifier's
    probability (0–1); a text in none of them gets the first candidate with 0, as
    LibreTranslate answers when no loaded language fits."""
    # A lone surrogate (JSON may spell one) is no UTF-8, which the identifier needs; as "?"
    # it changes no text's language.
    texts = [text.encode("utf-8", "replace").decode("utf-8") for text in texts]
    try:
        found_all = identify(texts)
    except UserError as e:  # the identifier's package or model is missing: the install's fault
        raise RequestError(
            400, "source", f"language detection is not available here ({e}); give the source"
        ) from None
    out = []
    for found, probability in found_all:
        code = next((c for c in candidates if _matches(found.lower(), c)), None)
        out.append((code, float(probability)) if code else (candidates[0], 0.0))
    return out
