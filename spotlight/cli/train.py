"""``spotlight train``: its flags, the run's config and the Ray options they ask for."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

from spotlight import interrupts
from spotlight.cli.common import add_price_flags
from spotlight.config import Config
from spotlight.job.run_watch import ClusterLost
from spotlight.overrides import apply_overrides
from spotlight.recipes import DEFAULT_RECIPE, RECIPES, exploration_note, get_recipe
from spotlight.scheduling.costs import PriceTable


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None:
        if args.set:
            raise ValueError("--set cannot change a resumed run: it continues with its config.json")
        cfg = _resumed_config(Path(args.resume), args.recipe)
        if args.runner is None:  # a run goes on where it ran
            from spotlight.training.run_folder import checkpoint_runner

            args.runner = checkpoint_runner(Path(args.resume))
    else:
        cfg = apply_overrides(get_recipe(args.recipe or DEFAULT_RECIPE), args.set)
    args.runner = args.runner or "ray"
    if args.iterations is not None:
        cfg = dataclasses.replace(cfg, num_iterations=args.iterations)
    if args.checkpoint is not None:
        cfg = dataclasses.replace(
            cfg, policy=dataclasses.replace(cfg.policy, checkpoint=args.checkpoint)
        )
    if args.reward_model is not None:
        cfg = dataclasses.replace(cfg, reward_model=args.reward_model)
    cfg.validate()
    if (note := exploration_note(cfg)) is not None:
        print(f"[spotlight] {note}", flush=True)
    if args.resume is not None:
        out, resume = Path(args.resume), True
    else:
        out = Path(args.out or f"runs/{cfg.recipe}-{time.strftime('%Y%m%d-%H%M%S')}")
        resume = False
    argv = getattr(args, "argv", None) or []
    try:
        return _run(args, cfg, out, resume)
    except interrupts.Interrupted as e:
        e.line = interrupted_line(e.name, out, argv)
        raise
    except ClusterLost as e:  # what was lost, what is kept, how to go on: in one message
        raise ClusterLost(f"{e}; the run stopped{what_is_kept(out, argv)}") from None


def _run(args: argparse.Namespace, cfg: Config, out: Path, resume: bool) -> int:
    """Run ``cfg`` into ``out`` on the runner the flags ask for."""
    if args.runner == "local":
        if args.spot_trace is not None:
            raise ValueError("--spot-trace replays preemptions on Ray: use --runner ray")
        from spotlight.scheduling.machine import check_device

        check_device(args.device)  # before the model is built
        from spotlight.training.run_local import run_local  # torch import: after argument checks

        run_local(cfg, out, resume=resume, device=args.device, log=sys.stdout)
        return 0
    from spotlight.job.cluster import check_local_machine

    opts = ray_options_from_args(args, cfg.recipe)
    opts.validate()
    check_local_machine(opts)  # before Ray and torch are imported
    from spotlight.job.run import run_ray

    run_ray(cfg, out, resume=resume, opts=opts, log=sys.stdout)
    return 0


CONFIG_FLAGS = ("--set", "--out", "--recipe", "--iterations", "--checkpoint", "--reward-model")
"""Flags whose values a run folder's ``config.json`` keeps: a ``--resume`` leaves them out."""


def resume_argv(argv: list[str], out: Path) -> list[str]:
    """``spotlight train``'s arguments that continue the run of ``argv`` in ``out``: its
    ``--resume`` and the flags of where it runs, without those ``config.json`` keeps."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0]
        if flag in (*CONFIG_FLAGS, "--resume"):
            skip = "=" not in word
            continue
        kept.append(word)
    if kept[:1] == ["train"]:
        kept = kept[1:]
    return ["train", "--resume", str(out), *kept]


def interrupted_line(signal_name: str, out: Path, argv: list[str]) -> str:
    """The one line an interrupted ``spotlight train`` prints: the checkpoint it keeps and the
    command that continues it (or, before the first checkpoint, the command that starts it
    again)."""
    return f"spotlight: interrupted ({signal_name}){what_is_kept(out, argv)}"


def what_is_kept(out: Path, argv: list[str]) -> str:
    """The end of the line of a stopped ``spotlight train``: the checkpoint ``out`` keeps and
    the command that continues it, or the command that starts it again."""
    from spotlight.training.run_folder import CKPT_DIR

    state = out / CKPT_DIR / "state.json"
    try:
        done = json.loads(state.read_text())["iterations_done"]
    except (OSError, ValueError, KeyError):
        named = any(w.split("=", 1)[0] in ("--out", "--resume") for w in argv)
        again = argv if named else [*argv, "--out", str(out)]
        return (
            " before the first iteration's checkpoint;"
            f" nothing to resume in {out}; start again: spotlight {shlex.join(again)}"
        )
    return (
        f"; kept {out / CKPT_DIR} after iteration {done};"
        f" resume: spotlight {shlex.join(resume_argv(argv, out))}"
    )


def ray_options_from_args(args: argparse.Namespace, recipe: str | None = None):
    """The :class:`RayOptions` that ``spotlight train``'s flags ask for; where a flag is left
    out, the recipe's hint (``recipes.RAY_HINTS``, e.g. SP degree 4 at 1280), else the
    dataclass's default."""
    from spotlight.job.options import RayOptions
    from spotlight.recipes import RAY_HINTS

    hint = RAY_HINTS.get(recipe or "", {}).get("sp_degree", RayOptions.sp_degree)
    sp_degree = args.sp_degree if args.sp_degree is not None else hint

    return RayOptions(
        num_samplers=args.samplers,
        num_train_workers=args.train_workers,
        threads_per_worker=args.threads,
        trainer_threads=args.trainer_threads,
        sampler_idle_priority=not args.no_idle_priority,
        device=args.device,
        prices=PriceTable(
            on_demand_usd_per_gpu_h=args.on_demand_usd_per_gpu_h, spot_discount=args.spot_discount
        ),
        wandb=not args.no_wandb,
        lease_s=args.lease_s,
        commit_every=args.commit_every,
        spill=args.spill,
        spill_wait_s=args.spill_wait_s,
        notice_sources=tuple(args.notice_sources),
        spot_trace=args.spot_trace,
        trace_time_scale=args.trace_time_scale,
        trace_notice_s=args.trace_notice_s,
        trace_hard_share=args.trace_hard_share,
        trace_start_s=args.trace_start_h * 3600 if args.trace_start_h is not None else None,
        trace_seed=args.trace_seed,
        sp_degree=sp_degree,
        sp_workers=args.sp_workers,
        reward_gpus=args.reward_gpus,
        trainer_samples=args.trainer_samples,
        merge_lora=args.merge_lora,
    )


def _resumed_config(run_dir: Path, recipe: str | None) -> Config:
    """The config a run was started with; ``recipe``, when given, must match it."""
    path = run_dir / "config.json"
    if not path.exists():
        raise ValueError(f"--resume {run_dir}: no config.json there (not a spotlight run folder)")
    cfg = Config.from_dict(json.loads(path.read_text()))
    if recipe is not None and recipe != cfg.recipe:
        raise ValueError(f"--resume {run_dir}: that run used recipe {cfg.recipe!r}, not {recipe!r}")
    return cfg


def add_parser(sub) -> None:
    from spotlight.job.options import RayOptions

    ray_defaults = RayOptions()  # the CLI's defaults are the dataclass's
    train = sub.add_parser(
        "train", help="RL post-training (Flow-GRPO or DiffusionNFT; on Ray by default)"
    )
    _add_what_flags(train)
    _add_where_flags(train, ray_defaults)
    _add_worker_flags(train, ray_defaults)
    pre_g = train.add_argument_group("preemptions (ray runner)")
    _add_preemption_flags(pre_g, ray_defaults)
    _add_spot_trace_flags(pre_g, ray_defaults)
    add_price_flags(train)
    train.set_defaults(func=_train)


def _add_what_flags(train: argparse.ArgumentParser) -> None:
    """What runs: the recipe, its overrides, the run folder, the models to start from."""
    train.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        help=f"named config (default {DEFAULT_RECIPE}; with --resume, the run's)",
    )
    train.add_argument("--iterations", type=int, help="override the recipe's iteration count")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field, e.g. --set grpo.learning_rate=3e-5 (repeatable; the"
        " fields are in spotlight/config.py)",
    )
    train.add_argument("--out", help="output folder (default runs/<recipe>-<time>)")
    train.add_argument("--resume", metavar="DIR", help="continue the run in DIR")
    train.add_argument("--checkpoint", help="policy checkpoint / model folder to start from")
    train.add_argument(
        "--reward-model",
        metavar="DIR",
        help="local folder of the reward's model (ocr-model: GOT-OCR 2.0; geneval-model: a folder"
        " with mask2former/ and clip/; clip: CLIP); default: the reward's own (docs/cluster.md)",
    )


def _add_where_flags(train: argparse.ArgumentParser, ray_defaults) -> None:
    """Where it runs: devices, the runner, sampler replicas and their SP groups."""
    train.add_argument(
        "--trainer-samples",
        action="store_true",
        help="the trainer workers sample rollout items while they wait for the rollout (GPU"
        " clusters: the rollout gets the trainer's GPUs too; docs/simulator.md)",
    )
    train.add_argument(
        "--merge-lora",
        action="store_true",
        help="sampler replicas sample with the LoRA adapters merged into the base weights"
        " (faster; grpo.loss nft or awm only: Flow-GRPO needs the sampler's log-probs)",
    )
    train.add_argument(
        "--reward-gpus",
        type=float,
        help="GPUs of the reward deployment (default: 1 for a model reward on CUDA, else 0)",
    )
    train.add_argument(
        "--device", default=ray_defaults.device, help="torch device (default %(default)s)"
    )
    train.add_argument(
        "--runner",
        choices=["ray", "local"],
        default=None,
        help="ray (default): the Serve/Train job (a local Ray unless RAY_ADDRESS is set); "
        "local: the single-process reference loop (explores too, in turn); --resume goes on "
        "with the runner that wrote the checkpoint unless told otherwise",
    )
    train.add_argument(
        "--samplers",
        type=int,
        default=ray_defaults.num_samplers,
        help="sampler replicas (ray runner; default %(default)s)",
    )
    train.add_argument(
        "--sp-degree",
        type=int,
        help="SP group size: GPUs (locally: worker processes) per sample, Ulysses SP above 1"
        f" (default: the recipe's, else {ray_defaults.sp_degree})",
    )
    train.add_argument(
        "--sp-workers",
        type=int,
        help="GPUs (locally: worker processes) per sampler replica, in SP groups of"
        " --sp-degree that share its items (default: --sp-degree, one group)",
    )


def _add_worker_flags(train: argparse.ArgumentParser, ray_defaults) -> None:
    """The trainer's workers, threads per process, and W&B."""
    train.add_argument(
        "--train-workers",
        type=int,
        default=ray_defaults.num_train_workers,
        help="Ray Train data-parallel workers (default %(default)s)",
    )
    train.add_argument(
        "--threads",
        type=int,
        default=ray_defaults.threads_per_worker,
        help="torch threads per sampler / reward replica (default %(default)s)",
    )
    train.add_argument(
        "--trainer-threads",
        type=int,
        default=ray_defaults.trainer_threads,
        help="torch threads per Ray Train worker (default %(default)s)",
    )
    train.add_argument(
        "--no-idle-priority",
        action="store_true",
        help="on a CPU device, do not run the replicas at idle priority (by default the trainer"
        " keeps its cores while spot exploration uses the rest)",
    )
    train.add_argument("--no-wandb", action="store_true", help="do not log to W&B")


def _add_preemption_flags(pre_g, ray_defaults) -> None:
    """How replicas survive preemptions: commits, leases, spill to on-demand, notices."""
    pre_g.add_argument(
        "--commit-every",
        type=int,
        default=ray_defaults.commit_every,
        help="replicas commit in-flight items every K denoising steps (0: on a notice only;"
        " default %(default)s)",
    )
    pre_g.add_argument(
        "--lease-s",
        type=float,
        default=ray_defaults.lease_s,
        help="item lease (a silent replica's items wait this long; default %(default)s)",
    )
    pre_g.add_argument(
        "--spill",
        choices=["never", "after_wait", "always"],
        default=ray_defaults.spill,
        help="when on-demand sampler replicas take rollout items (default %(default)s)",
    )
    pre_g.add_argument(
        "--spill-wait-s",
        type=float,
        default=ray_defaults.spill_wait_s,
        help="for --spill after_wait (default %(default)s)",
    )
    pre_g.add_argument(
        "--notice-sources",
        nargs="*",
        default=list(ray_defaults.notice_sources),
        choices=["aws", "gcp"],
        help="clouds whose instance-metadata preemption notices replicas poll",
    )


def _add_spot_trace_flags(pre_g, ray_defaults) -> None:
    """Replaying a spot capacity trace's preemptions on a local multi-node Ray."""
    pre_g.add_argument(
        "--spot-trace",
        metavar="PATH",
        help="replay this spot capacity trace on a local multi-node Ray (SkyPilot .json or"
        " Oobleck .csv; a bare name finds the shipped ones in spotlight/assets/traces)",
    )
    pre_g.add_argument(
        "--trace-time-scale",
        type=float,
        default=ray_defaults.trace_time_scale,
        help="replay this many times faster (default %(default)s)",
    )
    pre_g.add_argument(
        "--trace-notice-s",
        type=float,
        default=ray_defaults.trace_notice_s,
        help="wall seconds of notice per preemption (default %(default)s)",
    )
    pre_g.add_argument(
        "--trace-hard-share",
        type=float,
        default=ray_defaults.trace_hard_share,
        help="share of replayed preemptions without a notice (a hard kill; default %(default)s)",
    )
    pre_g.add_argument(
        "--trace-start-h", type=float, help="trace hour to start at (default: first capacity)"
    )
    pre_g.add_argument(
        "--trace-seed",
        type=int,
        default=ray_defaults.trace_seed,
        help="which nodes are preempted",
    )
