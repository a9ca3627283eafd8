"""Run the peers' hf_marian_train.py unchanged, saving the model at wall-clock marks on the way.

usage (with the peers' Python): peer_snapshots.py --every SECONDS -- <hf_marian_train.py args>

The peer script saves its model once, at the end; a BLEU-against-minutes curve needs the model
at earlier times too. This wrapper imports the script as a module and wraps the optimizer it
builds, so that after the first update past each mark the model is written with
`save_pretrained` to OUT/snapshots/s<seconds>/ and a line goes to OUT/snapshots.jsonl. The
training loop, data, model and schedule are the peer's own; a save takes well under a second
and counts against the peer's budget, as the project's checkpoints count against its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

PEERS = Path(
    os.environ.get("PEERS_DIR", Path(__file__).resolve().parents[2] / "shared/bench/peers")
)
sys.path.insert(0, str(PEERS))

import hf_marian_train as peer  # noqa: E402  (sets the thread count on import)
import torch  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--every", type=float, required=True, help="seconds between snapshots")
    args, rest = p.parse_known_args()
    rest = [x for x in rest if x != "--"]
    out = Path(rest[rest.index("--out") + 1])
    snaps = out / "snapshots"
    snaps.mkdir(parents=True, exist_ok=True)
    log = out / "snapshots.jsonl"
    log.unlink(missing_ok=True)

    held: dict = {}
    build = peer.build_model

    def build_and_keep(*a, **kw):
        held["model"] = build(*a, **kw)
        return held["model"]

    class SnapshottingAdamW(torch.optim.AdamW):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            # The peer starts its clock right after building the optimizer.
            self._start = time.perf_counter()
            self._next = args.every
            self._steps = 0

        def step(self, closure=None):
            result = super().step(closure)
            self._steps += 1
            elapsed = time.perf_counter() - self._start
            if elapsed >= self._next:
                folder = snaps / f"s{int(self._next):06d}"
                held["model"].save_pretrained(folder)
                with open(log, "a") as f:
                    f.write(
                        json.dumps({"step": self._steps, "seconds": elapsed, "dir": str(folder)})
                        + "\n"
                    )
                while self._next <= elapsed:
                    self._next += args.every
            return result

    peer.build_model = build_and_keep
    torch.optim.AdamW = SnapshottingAdamW
    sys.argv = [str(PEERS / "hf_marian_train.py"), *rest]
    peer.main()


if __name__ == "__main__":
    main()
