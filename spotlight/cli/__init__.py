"""The spotlight command: train (RL post-training of a DiT policy, on Ray by default), pretrain
(a tiny base model for a task), eval (a tiny checkpoint scored on a task's validation prompts),
simulate (Spotlight and its baselines in a trace-driven cluster simulation) and bench
(benchmarks that need real runs: exploration, regroup)."""

from __future__ import annotations

import argparse
import os
import sys

from spotlight import interrupts
from spotlight.cli import bench, models, simulate, train
from spotlight.cli.train import ray_options_from_args
from spotlight.job.run_watch import ClusterLost

__all__ = ["build_parser", "main", "ray_options_from_args"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spotlight", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train.add_parser(sub)
    models.add_parser(sub)
    simulate.add_parser(sub)
    bench.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # an interrupted command prints the command that continues it
    if getattr(args, "resume", None) and getattr(args, "out", None):
        parser.error("--resume DIR continues DIR; do not also pass --out")
    try:
        with interrupts.handled():
            return args.func(args)
    except interrupts.Interrupted as e:  # Ctrl-C, SIGTERM: what was kept, how to go on
        print(e.line or f"spotlight: interrupted ({e.name})", file=sys.stderr, flush=True)
        return e.exit_code
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as e:
        print(f"spotlight: error: {e}", file=sys.stderr)  # e.g. an --out that is a file
        return 2
    except ClusterLost as e:  # a Ray run that cannot go on: why, in one message
        print(f"spotlight: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `spotlight ... | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
        return 141
