"""``spotlight pretrain`` and ``spotlight eval``: make and score the tiny base models."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path


def _pretrain(args: argparse.Namespace) -> int:
    import torch

    from spotlight.training.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(
        task=args.task,
        num_samples=args.num_samples,
        batch_size=args.batch_size,
        seed=args.seed,
        num_workers=args.workers,
        checkpoint_at=tuple(args.checkpoint_at),
        checkpoint_every_s=args.checkpoint_every_s,
        learning_rate=args.lr,
        warmup_steps=args.warmup_steps,
        init=args.init,
        warm_start=args.warm_start,
        arch=_arch(args.arch),
        stage_samples=args.stage_samples,
        state_every_s=args.state_every_s,
        precision=args.precision,
    )
    dtype = {"float32": torch.float32, "float16": torch.float16}[args.save_dtype]
    paths = pretrain(cfg, Path(args.out), device=args.device, log=sys.stdout, save_dtype=dtype)
    print(f"[pretrain] checkpoints: {', '.join(map(str, paths))}")
    return 0


def _arch(pairs: list[str]) -> dict[str, int]:
    """``--arch patch=2 num_layers=6`` as a dict of ints (the names are checked by the config)."""
    arch = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"--arch takes FIELD=INTEGER pairs, got {pair!r}")
        arch[key.strip()] = int(value)
    return arch


def _eval(args: argparse.Namespace) -> int:
    from spotlight.bench import repo_relative
    from spotlight.config import PolicyConfig
    from spotlight.policies import make_policy
    from spotlight.recipes import TASK_SAMPLER
    from spotlight.rewards import build_reward
    from spotlight.tasks import base_checkpoint, get_task
    from spotlight.training.evaluate import score_prompts, write_eval
    from spotlight.training.run_folder import check_checkpoint_task

    task = get_task(args.task)
    checkpoint = args.checkpoint or base_checkpoint(args.task)
    check_checkpoint_task(checkpoint, task.name)  # before a model is built
    sampler = dataclasses.replace(TASK_SAMPLER, guidance_scale=args.guidance, num_steps=args.steps)
    sampler.validate()
    prompts = task.prompts(args.split)[: args.num_prompts]
    policy = make_policy(PolicyConfig(name="tiny", checkpoint=checkpoint), args.device)
    t0 = time.perf_counter()
    reward = build_reward(task.reward)
    scores = score_prompts(
        policy, reward, prompts, args.num_seeds, sampler, chunk=64, log=sys.stdout
    )
    extra = {
        "split": args.split,
        "sampler": dataclasses.asdict(sampler),
        "seconds": time.perf_counter() - t0,
    }
    # eval.json names a checkpoint inside the repository by its path relative to it
    path = write_eval(Path(args.out), task.name, repo_relative(checkpoint), scores, extra)
    doc = json.loads(path.read_text())
    print(
        f"[eval] {task.name}: mean reward {doc['mean_reward']:.4f} over {len(prompts)}"
        f" {args.split} prompts "
        f"x {args.num_seeds} seeds; {doc['frac_prompts_std_ge_0.1']:.0%} of prompts have a "
        f"reward std >= 0.1 ({extra['seconds']:.0f} s) -> {path}"
    )
    return 0


def add_parser(sub) -> None:
    from spotlight.tasks import TASK_NAMES

    _add_pretrain_parser(sub, TASK_NAMES)
    _add_eval_parser(sub, TASK_NAMES)


def _add_pretrain_parser(sub, task_names: tuple[str, ...]) -> None:
    pre = sub.add_parser("pretrain", help="flow-matching pretraining of a tiny base model")
    pre.add_argument("--task", required=True, choices=task_names)
    pre.add_argument("--num-samples", type=int, default=1_000_000, help="training samples")
    pre.add_argument("--batch-size", type=int, default=256)
    pre.add_argument("--seed", type=int, default=0)
    pre.add_argument("--workers", type=int, default=2, help="data-loader processes")
    pre.add_argument(
        "--checkpoint-at", type=int, nargs="*", default=[], help="also save at these sample counts"
    )
    pre.add_argument(
        "--checkpoint-every-s",
        type=float,
        default=0.0,
        help="also save every this many seconds (for runs under a time limit)",
    )
    pre.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    pre.add_argument("--init", help="start from this checkpoint instead of a random init")
    pre.add_argument(
        "--warm-start",
        metavar="CKPT",
        help="random init of --arch with the tensors whose names and shapes match copied from "
        "this checkpoint of another architecture",
    )
    pre.add_argument("--warmup-steps", type=int, default=200)
    pre.add_argument("--save-dtype", choices=["float32", "float16"], default="float32")
    pre.add_argument(
        "--precision",
        choices=["float32", "bfloat16"],
        default="float32",
        help="bfloat16: forward and backward under autocast (weights stay float32); fast where "
        "the hardware has bfloat16 matrix instructions (a GPU, AVX512-BF16, AMX), several times "
        "slower than float32 elsewhere; a resumed run may change it (each checkpoint records "
        "which steps ran in which)",
    )
    pre.add_argument(
        "--arch",
        nargs="*",
        default=[],
        metavar="FIELD=N",
        help="architecture fields other than the task's default model "
        "(patch, num_layers, num_heads, head_dim, text_dim)",
    )
    pre.add_argument(
        "--stage-samples",
        type=int,
        default=0,
        help="stop after this many more samples, the state kept; the same command goes on",
    )
    pre.add_argument(
        "--state-every-s",
        type=float,
        default=600.0,
        help="keep the resumable state at least this often (seconds)",
    )
    pre.add_argument(
        "--out",
        default="runs/pretrain",
        help="folder for the checkpoints and the resumable state (a rerun goes on from it)",
    )
    pre.add_argument("--device", default="cpu")
    pre.set_defaults(func=_pretrain)


def _add_eval_parser(sub, task_names: tuple[str, ...]) -> None:
    ev = sub.add_parser("eval", help="score a checkpoint on a task's validation prompts")
    ev.add_argument(
        "--split",
        choices=["val", "train"],
        default="val",
        help="the task's validation prompts, or its training prompts (how much of a run's"
        " gain is on the prompts it trained on)",
    )
    ev.add_argument("--task", required=True, choices=task_names)
    ev.add_argument("--checkpoint", help="tiny-policy checkpoint (default: the shipped base model)")
    ev.add_argument("--num-seeds", type=int, default=8, help="seeds 0..N-1 per prompt")
    ev.add_argument("--num-prompts", type=int, default=None, help="first N prompts of --split")
    ev.add_argument("--guidance", type=float, default=3.0, help="classifier-free guidance")
    ev.add_argument("--steps", type=int, default=10, help="denoising steps")
    ev.add_argument("--out", required=True, help="folder for eval.json")
    ev.add_argument("--device", default="cpu")
    ev.set_defaults(func=_eval)
