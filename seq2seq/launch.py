"""`python -m seq2seq.launch`: torchrun, with its failures said in one line each.

It takes exactly torchrun's arguments and runs the same agent (`torch.distributed.run`); what it
adds is the message when the job cannot start or stops. torchrun reports a rendezvous that never
forms as a bare `RendezvousTimeoutError` traceback, and a failed worker as a page of tables; here
the first names the endpoint, the id and the wait, and the second the rank that failed first
(whose own error is already above, printed by that process).

    python -m seq2seq.launch --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint head:29400 --rdzv-id job42 -m seq2seq train -c configs/en-fr.yaml
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys

from torch.distributed import DistError
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError

from seq2seq.cli.app import main as cli_main


def _conf(text: str | None) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in (text or "").split(",") if "=" in item)
    return {k.strip(): v.strip() for k, v in pairs}


def rendezvous_timeout_message(args, detail: str = "") -> str:
    """What a user needs when the nodes never meet: where they were to meet, and for how long."""
    endpoint = _endpoint(args)
    conf = _conf(args.rdzv_conf)
    if args.rdzv_backend == "static":
        wait = conf.get("timeout", "900")
        how = f"static rendezvous at {endpoint} (node rank {args.node_rank})"
        where = "the same --master-addr and --master-port (reachable from all of them)"
        knob = "timeout"
    else:
        wait = conf.get("join_timeout", "600")
        how = f"{args.rdzv_backend} rendezvous at {endpoint}, id {args.rdzv_id!r}"
        where = "the same --rdzv-endpoint (reachable from all of them) and --rdzv-id"
        knob = "join_timeout"
    detail = f" ({detail.splitlines()[0]})" if detail else ""
    return (
        f"the {how} did not form within {wait} s: not all of --nnodes {args.nnodes} nodes "
        f"joined{detail}. Start the same command on every node, with {where}; the wait is "
        f"--rdzv-conf {knob}=SECONDS"
    )


def child_failure_message(error) -> str:
    """The worker that failed first, from torchrun's ChildFailedError."""
    rank, failure = error.get_first_failure()
    how = (
        f"was killed by {failure.signal_name()}"
        if failure.exitcode < 0
        else f"exited with code {failure.exitcode}"
    )
    others = len(error.failures) - 1
    plural = "es" if others != 1 else ""
    rest = f"; {others} other process{plural} stopped with it" if others else ""
    return (
        f"the training job failed: rank {rank} (local rank {failure.local_rank}, pid "
        f"{failure.pid}) {how}{rest}; its error is reported above by that process"
    )


def train_in_fork(*argv: str) -> None:
    """One worker: `seq2seq ARGV` in a process forked from the agent, which has imported torch
    and the trainer already; those pages stay shared between the ranks of a machine."""
    _default_signal_handlers()
    sys.argv = ["seq2seq", *argv]
    try:
        cli_main()
    except SystemExit as e:  # typer ends by exiting; the agent wants a return on success
        if e.code not in (0, None):
            raise


def _default_signal_handlers() -> None:
    """Undo the agent's handlers in a forked worker: they raise torchrun's SignalException,
    which a worker still preparing its data printed as a traceback. The trainer installs its
    own (stop after the update, save) when its loop starts; before that a signal ends the
    worker as it ends any process, and the agent says the one line."""
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def start_failure_message(args, error: BaseException) -> str:
    """Why the agent could not start the job: the rendezvous timed out, or what else failed."""
    text = str(error)
    # A static rendezvous reports its wait as the store's timeout, not RendezvousTimeoutError.
    timed_out = isinstance(error, RendezvousTimeoutError) or "timed out" in text.lower()
    if timed_out:
        return rendezvous_timeout_message(args, text)
    first = text.splitlines()[0] if text else "no detail"
    return (
        f"the training job could not start: {type(error).__name__}: {first} "
        f"(rendezvous {args.rdzv_backend} at {_endpoint(args)})"
    )


def _endpoint(args) -> str:

    return torchrun.get_rdzv_endpoint(args) or "(none)"


def _forking(config_from_args):
    """torchrun's config_from_args, but `-m seq2seq …` runs as `train_in_fork` workers."""

    def configure(args):
        config, cmd, cmd_args = config_from_args(args)
        if cmd_args[:3] == ["-u", "-m", "seq2seq"]:
            # Import once here: a forked worker shares these pages (torch's operator tables,
            # the modules' code) until it writes them; gc.freeze keeps the collector from
            # touching, and so copying, every object the imports made.
            # Only a `-m seq2seq` job forks, and only it wants the trainer imported here.
            from seq2seq.train import trainer  # noqa: F401

            gc.freeze()
            config.start_method = "fork"
            return config, train_in_fork, cmd_args[3:]
        return config, cmd, cmd_args

    return configure


def main(argv: list[str] | None = None) -> int:
    """Run torchrun's agent with `argv`; 0 when every worker finished, 1 with one line if not."""
    argv = sys.argv[1:] if argv is None else argv
    args = torchrun.parse_args(argv)
    explicit = any(a.startswith(("--start-method", "--start_method")) for a in argv)
    if not explicit and sys.platform == "linux":
        torchrun.config_from_args = _forking(torchrun.config_from_args)
    # A restarted group must not find the last attempt's keys in torchrun's rendezvous store,
    # which it otherwise shares with the workers (pytorch#135712): each attempt gets its own.
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # torchrun's agent logs each restart and membership change at WARNING; keep those, and
    # keep its per-failure tables out of the way of the one line below.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.WARNING)
    try:
        torchrun.run(args)
    except (RendezvousTimeoutError, DistError) as e:
        # Raised by the agent itself, before any worker ran.
        print(f"error: {start_failure_message(args, e)}", file=sys.stderr)
        return 1
    except ChildFailedError as e:
        print(f"error: {child_failure_message(e)}", file=sys.stderr)
        return 1
    except SignalException as e:
        # The agent has passed the signal on: each worker finished its update and rank 0 saved.
        name = signal.Signals(e.sigval).name
        print(f"stopped by {name}: continue the run with --resume", file=sys.stderr)
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
