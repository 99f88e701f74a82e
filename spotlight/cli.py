"""The ``spotlight`` command: ``spotlight train`` (more subcommands join as they land)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from spotlight.config import Config
from spotlight.recipes import DEFAULT_RECIPE, RECIPES, get_recipe


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None:
        cfg = _resumed_config(Path(args.resume), args.recipe)
    else:
        cfg = get_recipe(args.recipe or DEFAULT_RECIPE)
    if args.iterations is not None:
        cfg = dataclasses.replace(cfg, num_iterations=args.iterations)
    if args.checkpoint is not None:
        cfg = dataclasses.replace(
            cfg, policy=dataclasses.replace(cfg.policy, checkpoint=args.checkpoint)
        )
    cfg.validate()
    from spotlight.run_local import run_local  # torch/diffusers import: after argument checks

    if args.resume is not None:
        out, resume = Path(args.resume), True
    else:
        out = Path(args.out or f"runs/{cfg.recipe}-{time.strftime('%Y%m%d-%H%M%S')}")
        resume = False
    run_local(cfg, out, resume=resume, device=args.device, log=sys.stdout)
    return 0


def _resumed_config(run_dir: Path, recipe: str | None) -> Config:
    """The config a run was started with; ``recipe``, when given, must match it."""
    path = run_dir / "config.json"
    if not path.exists():
        raise ValueError(f"--resume {run_dir}: no config.json there (not a spotlight run folder)")
    cfg = Config.from_dict(json.loads(path.read_text()))
    if recipe is not None and recipe != cfg.recipe:
        raise ValueError(f"--resume {run_dir}: that run used recipe {cfg.recipe!r}, not {recipe!r}")
    return cfg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spotlight", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run Flow-GRPO training (single process for now)")
    train.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        help=f"named config (default {DEFAULT_RECIPE}; with --resume, the run's)",
    )
    train.add_argument("--iterations", type=int, help="override the recipe's iteration count")
    train.add_argument("--out", help="output folder (default runs/<recipe>-<time>)")
    train.add_argument("--resume", metavar="DIR", help="continue the run in DIR")
    train.add_argument("--checkpoint", help="policy checkpoint / model folder to start from")
    train.add_argument("--device", default="cpu", help="torch device (default cpu)")
    train.set_defaults(func=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "resume", None) and getattr(args, "out", None):
        parser.error("--resume DIR continues DIR; do not also pass --out")
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"spotlight: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
