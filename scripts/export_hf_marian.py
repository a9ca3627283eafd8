"""Write a run as a Hugging Face MarianMTModel folder: `seq2seq export --format hf-marian`.

    python scripts/export_hf_marian.py --run runs/x --out /tmp/x-hf [--checkpoint FILE]

Kept for the benchmarks and notes that call it by this name; the conversion (exact, tokenizer
files included) is seq2seq/hf_marian.py and needs neither transformers nor a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone, uninstalled

from seq2seq.errors import UserError  # noqa: E402
from seq2seq.interop.hf_marian import export_hf_marian  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path)
    args = p.parse_args()
    try:
        out = export_hf_marian(args.run, args.out, args.checkpoint)
    except UserError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
