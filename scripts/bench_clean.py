"""How much known noise `seq2seq clean` removes, and how many clean pairs it takes with it
(issue 42 item 2: the rule filters, and the dual cross-entropy filter with --forward/--backward).

    flock -x /work/cpu.lock python scripts/bench_clean.py --data ../shared/data/enfr
    python scripts/bench_clean.py --forward runs/enfr --backward runs/fren   # + dual_xent

A random sample of the enfr train split (20,000 pairs by default) gets noise in a known share
of its pairs (20%), the same number of pairs of each kind:

- misaligned: the target of another pair;
- wrong_language: one side replaced by a line of the other language (another pair's);
- copy: the source copied to the target;
- truncated: the target cut to its first third of words (targets of 6 words or more);
- boilerplate: the target replaced by web boilerplate and HTML (a menu, a cookie notice);
- numbers: a number of the target changed (pairs whose two sides share a number).

Then `seq2seq clean` (the CLI, default filters, 2 processes) cleans the copy; each noisy pair
is looked up in rejected.tsv. Printed: per kind the share removed and by which filters, and the
share of the untouched pairs removed (the sample's own noise and repeats included).
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from seq2seq.config import CleanConfig
from seq2seq.data.clean import normalise

BOILERPLATE = [
    '<div class="nav"><a href="/">Home</a> | <a href="/about">About us</a> | '
    '<a href="/contact">Contact</a></div>',
    "We use cookies to improve your experience. By continuing to browse, you accept our "
    '<a href="https://www.example.com/cookies">cookie policy</a>.',
    "Copyright © 2024 Example Inc. All rights reserved. | Privacy Policy | Terms of Use",
    '<p>&nbsp;</p><p><img src="/img/banner.png" alt="banner" /></p>',
    "Share this page: Facebook Twitter LinkedIn Email Print",
    "<br/><br/>Subscribe to our newsletter &raquo; <b>Sign up</b>",
    "Skip to main content Toggle navigation Menu Search",
    "Posted by admin on 12/03/2019 at 10:42 | 0 comments",
]
KINDS = ("misaligned", "wrong_language", "copy", "truncated", "boilerplate", "numbers")
NUMBER = re.compile(r"\d+")


def read(path: Path) -> list[str]:
    """The lines of a file without their newlines."""
    return path.read_text(encoding="utf-8").splitlines()


def change_number(tgt: str, rng: random.Random) -> str:
    """The target with one of its numbers replaced by another."""
    found = list(NUMBER.finditer(tgt))
    m = rng.choice(found)
    new = str(int(m.group()) + rng.randint(1, 9))
    return tgt[: m.start()] + new + tgt[m.end() :]


def noisy_pair(kind: str, i: int, en: list[str], fr: list[str], rng: random.Random):
    """Pair i of the sample turned into noise of one kind."""
    other = rng.randrange(len(en))
    if kind == "misaligned":
        return en[i], fr[other]
    if kind == "wrong_language":
        return (en[i], en[other]) if rng.random() < 0.5 else (fr[other], fr[i])
    if kind == "copy":
        return en[i], en[i]
    if kind == "truncated":
        words = fr[i].split()
        return en[i], " ".join(words[: max(1, len(words) // 3)])
    if kind == "boilerplate":
        return en[i], rng.choice(BOILERPLATE)
    return en[i], change_number(fr[i], rng)


def eligible(kind: str, src: str, tgt: str) -> bool:
    """Whether a clean pair can carry this kind of noise visibly."""
    if kind == "truncated":
        return len(tgt.split()) >= 6
    if kind == "numbers":
        return bool(set(NUMBER.findall(src)) & set(NUMBER.findall(tgt)))
    return True


def inject(en, fr, rate: float, seed: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The noisy sample and each pair's kind ("clean" for an untouched one)."""
    rng = random.Random(seed)
    order = list(range(len(en)))
    rng.shuffle(order)
    per_kind = int(len(en) * rate) // len(KINDS)
    kinds = ["clean"] * len(en)
    for kind in KINDS:
        chosen = [i for i in order if kinds[i] == "clean" and eligible(kind, en[i], fr[i])]
        for i in chosen[:per_kind]:
            kinds[i] = kind
    pairs = [
        (en[i], fr[i]) if kinds[i] == "clean" else noisy_pair(kinds[i], i, en, fr, rng)
        for i in range(len(en))
    ]
    return pairs, kinds


def removed_by(pairs, out: Path) -> list[str | None]:
    """The filter that rejected each pair (None: kept), matched through rejected.tsv."""
    rejected: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in (out / "rejected.tsv").read_text(encoding="utf-8").splitlines():
        name, src, tgt = line.split("\t")
        rejected[(src, tgt)].append(name)
    cfg = CleanConfig()
    found = []
    for src, tgt in pairs:
        names = rejected.get(normalise(src, tgt, cfg))
        found.append(names.pop(0) if names else None)
    return found


def write_noisy(folder: Path, pairs, kinds) -> None:
    """The noisy corpus as line-aligned files, with each line's noise kind beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    for side, lang in ((0, "en"), (1, "fr")):
        text = "".join(p[side] + "\n" for p in pairs)
        (folder / f"noisy.{lang}").write_text(text, encoding="utf-8")
    (folder / "kinds.txt").write_text("".join(k + "\n" for k in kinds), encoding="utf-8")
    print(f"{len(pairs):,} pairs, {sum(k != 'clean' for k in kinds):,} noisy -> {folder}")


def main() -> None:
    """Inject, clean, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/enfr"))
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--write",
        type=Path,
        help="instead: write the noisy corpus (noisy.en, noisy.fr, kinds.txt) there and stop; "
        "--pairs 0 takes the whole train split",
    )
    parser.add_argument("--forward", type=Path, help="en→fr run: with --backward, dual_xent on")
    parser.add_argument("--backward", type=Path, help="fr→en run, for --forward")
    parser.add_argument("--max-dual-xent", type=float, help="the clean command's threshold")
    args = parser.parse_args()
    en, fr = read(args.data / "train.en"), read(args.data / "train.fr")
    if args.pairs:
        sample = sorted(random.Random(args.seed).sample(range(len(en)), args.pairs))
        en, fr = [en[i] for i in sample], [fr[i] for i in sample]
    pairs, kinds = inject(en, fr, args.rate, args.seed)
    if args.write:
        write_noisy(args.write, pairs, kinds)
        return
    with tempfile.TemporaryDirectory(prefix="bench-clean-") as tmp:
        folder = Path(tmp)
        for side, lang in ((0, "en"), (1, "fr")):
            text = "".join(p[side] + "\n" for p in pairs)
            (folder / f"noisy.{lang}").write_text(text, encoding="utf-8")
        command = [
            sys.executable, "-m", "seq2seq", "--quiet", "clean", "--src", folder / "noisy.en",
            "--tgt", folder / "noisy.fr", "--src-lang", "en", "--tgt-lang", "fr",
            "--out", folder / "out",
        ]  # fmt: skip
        if args.forward and args.backward:
            command += ["--forward", args.forward, "--backward", args.backward]
        if args.max_dual_xent is not None:
            command += ["--max-dual-xent", args.max_dual_xent]
        start = time.perf_counter()
        subprocess.run([str(c) for c in command], check=True)
        seconds = time.perf_counter() - start
        found = removed_by(pairs, folder / "out")
    noisy = sum(k != "clean" for k in kinds)
    print(f"{len(pairs):,} pairs, {noisy:,} noisy; clean took {seconds:.1f} s")
    print("| kind | pairs | removed | by filter |")
    print("|---|---|---|---|")
    for kind in (*KINDS, "clean"):
        hits = [f for f, k in zip(found, kinds) if k == kind]
        gone = Counter(f for f in hits if f is not None)
        share = sum(gone.values()) / len(hits)
        by = ", ".join(f"{name} {n}" for name, n in gone.most_common())
        print(f"| {kind} | {len(hits):,} | {share:.1%} | {by} |")


if __name__ == "__main__":
    main()
