"""BLEU on augmented copies of the enfr test half: does a run trained with `data.augment`
translate upper-case, title-case, unpunctuated, misspelt and tagged input better, and what does
it lose on plain input (issue 42 item 3)?

    python scripts/bench_augment.py --run /work/bench/s7/clean --run /work/bench/s7/augmented

The test half of valid (lines 500-1000, the enfr configs' test split, `skip_pairs: 499`) and one
copy of it per kind, each made by seq2seq.data.augment's own functions applied to every pair:

- upper: both sides in upper case;
- title: both sides in title case;
- no_punct: both sides without their final punctuation (pairs where both end with some);
- typos: typos in the source (augment.typos, seeded);
- tags: an inline tag (`<b>…</b>` and the other INLINE_TAGS, seeded) around both whole sentences,
  or around an aligned word pair with `--align` (Pharaoh lines of the same file).

Each run translates every set with its own decode settings (beam search), scored as
`seq2seq evaluate` scores (decode.evaluate.score: sacrebleu BLEU). Printed: a markdown table,
run × set, and the mean over the augmented sets. A run still being written (a live process names
its directory, a checkpoint write is in flight, or there is no checkpoint yet) is refused before
anything is decoded.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from seq2seq.config import run_decode
from seq2seq.data import augment
from seq2seq.data.corpus import read_lines, word_links
from seq2seq.decode.evaluate import score
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.run.checkpoint import best_or_latest, checkpoint_dir

SETS = ("plain", "upper", "title", "no_punct", "typos", "tags")
AUGMENTED = SETS[1:]
DATA = Path("../shared/data/enfr")

Pairs = tuple[list[str], list[str]]


def held_out(src: Path, ref: Path, skip: int, align: Path | None = None):
    """Sources, references and word links (None without `align`) of the pairs after `skip`."""
    sources, references = read_lines(src)[skip:], read_lines(ref)[skip:]
    if len(sources) != len(references):
        raise UserError(f"{src} and {ref} differ in length")
    if not sources:
        raise UserError(f"no pairs left in {src} after the first {skip}")
    if align is None:
        return sources, references, None
    lines = read_lines(align)[skip:]
    if len(lines) != len(sources):
        raise UserError(f"{align} has {len(lines) + skip} lines, {src} {len(sources) + skip}")
    return sources, references, [word_links(line, skip + i) for i, line in enumerate(lines)]


def _each(pairs: list[tuple[str, str]]) -> Pairs:
    return [s for s, _ in pairs], [t for _, t in pairs]


def augmented_sets(
    sources: list[str], references: list[str], links=None, seed: int = 1
) -> dict[str, Pairs]:
    """The plain set and one copy per kind of augmentation, in SETS order."""
    pairs = list(zip(sources, references))
    # One stream per random kind: each set is the same whichever others are made.
    typo_rng, tag_rng = (np.random.default_rng([seed, k]) for k in (1, 2))
    links = links or [None] * len(pairs)
    return {
        "plain": (list(sources), list(references)),
        "upper": _each([augment.uppercase(s, t) for s, t in pairs]),
        "title": _each([augment.titlecase(s, t) for s, t in pairs]),
        "no_punct": _each([augment.remove_end_punct(s, t) for s, t in pairs]),
        "typos": ([augment.typos(s, typo_rng) for s in sources], list(references)),
        "tags": _each([augment.tag_words(s, t, w, tag_rng) for (s, t), w in zip(pairs, links)]),
    }


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])  # after the name, which may hold spaces


def _own_lineage() -> set[int]:
    """This process and its ancestors: the shell that started the bench names the runs too."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = _parent(pid)
        except (OSError, ValueError, IndexError):
            break
    return pids


def _names(args: list[str], cwd: Path, run: Path) -> bool:
    # `--run R`, `--run=R`, `--set run_dir=R`, relative to the process's own directory.
    for piece in (p for a in args for p in a.split("=") if 0 < len(p) < 4096):
        try:
            if cwd.joinpath(piece).resolve() == run:
                return True
        except (OSError, RuntimeError, ValueError):  # not a path at all (code, a loop)
            continue
    return False


def processes_naming(run: Path) -> list[tuple[int, str]]:
    """(pid, command line) of the other live processes whose arguments name the run directory
    (a training, an evaluation writing into it); none where /proc is missing."""
    proc, run, mine = Path("/proc"), run.resolve(), _own_lineage()
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # gone meanwhile, or another user's
            continue
        if _names(args, cwd, run):
            found.append((int(entry.name), " ".join(args).strip()))
    return found


def check_finished(run: Path) -> None:
    """One clear error when the run is not a finished one that can be read whole."""
    if not (run / "config.yaml").is_file():
        raise UserError(f"{run} is no run directory (no config.yaml)")
    writers = processes_naming(run)
    if writers:
        pid, command = writers[0]
        raise UserError(
            f"{run} is still being written: process {pid} names it ({command[:120]}); "
            "wait until it ends"
        )
    in_flight = sorted(p.name for p in checkpoint_dir(run).glob(".*tmp*"))
    if in_flight:
        raise UserError(f"{run} has a checkpoint write in flight ({in_flight[0]}); wait for it")
    if best_or_latest(run) is None:
        raise UserError(f"{run} has no checkpoint yet: is it still training?")


def bleu_by_set(run: Path, sets: dict[str, Pairs], device: str, beam_size: int | None, out):
    """The run's BLEU on each set; its outputs written to out/<run>.<set>.hyp when `out`."""
    decode = run_decode(run, beam_size=beam_size)
    translator, used = load_translator(run, device=device, decode=decode)
    print(f"{run}: {used}", file=sys.stderr)
    scores = {}
    for name, (sources, references) in sets.items():
        hypotheses = translator.translate(sources)
        scores[name] = score(hypotheses, references).bleu
        if out is not None:
            write_lines(out / f"{run.name}.{name}.hyp", hypotheses)
    return scores


def write_lines(path: Path, lines: list[str]) -> None:
    """The lines as a UTF-8 file, one a line."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def table(rows: dict[str, dict[str, float]], changed: dict[str, int]) -> str:
    """The markdown table: a row per run, a column per set (with how many inputs it changed),
    then the mean over the augmented sets."""
    head = [f"{s} ({changed[s]})" if s != "plain" else s for s in SETS]
    lines = ["| run | " + " | ".join(head) + " | augmented mean |"]
    lines.append("|---" * (len(SETS) + 2) + "|")
    for run, scores in rows.items():
        mean = sum(scores[s] for s in AUGMENTED) / len(AUGMENTED)
        cells = [f"{scores[s]:.2f}" for s in SETS] + [f"{mean:.2f}"]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def changed_counts(sets: dict[str, Pairs]) -> dict[str, int]:
    """How many pairs of each set differ from the plain ones (on either side)."""
    plain = list(zip(*sets["plain"]))
    return {k: sum(p != q for p, q in zip(plain, zip(*v))) for k, v in sets.items()}


def main(argv: list[str] | None = None) -> int:
    """Make the sets, check the runs, decode and score, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, action="append", required=True, help="repeatable")
    parser.add_argument("--src", type=Path, default=DATA / "valid.en")
    parser.add_argument("--ref", type=Path, default=DATA / "valid.fr")
    parser.add_argument("--skip", type=int, default=499, help="pairs before the test half")
    parser.add_argument("--align", type=Path, help="Pharaoh word alignments of --src/--ref")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--beam-size", type=int, help="default: each run's decode.beam_size")
    parser.add_argument("--out", type=Path, help="write the sets and each run's outputs there")
    args = parser.parse_args(argv)
    try:
        sets = augmented_sets(*held_out(args.src, args.ref, args.skip, args.align), args.seed)
        for run in args.run:
            check_finished(run)
        names = [run.name for run in args.run]
        if args.out is not None and len(set(names)) < len(names):
            raise UserError(f"--out: runs of the same name would write the same files: {names}")
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            for name, (sources, references) in sets.items():
                write_lines(args.out / f"{name}.src", sources)
                write_lines(args.out / f"{name}.ref", references)
        rows = {
            str(run): bleu_by_set(run, sets, args.device, args.beam_size, args.out)
            for run in args.run
        }
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(sets['plain'][0])} pairs from {args.src} after {args.skip}; BLEU (sacrebleu)")
    print(table(rows, changed_counts(sets)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
