"""The ``spotlight`` command: ``spotlight train`` (more subcommands join as they land)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from spotlight.config import Config, apply_overrides
from spotlight.costs import PriceTable
from spotlight.recipes import DEFAULT_RECIPE, RECIPES, get_recipe


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None:
        if args.set:
            raise ValueError("--set cannot change a resumed run: it continues with its config.json")
        cfg = _resumed_config(Path(args.resume), args.recipe)
    else:
        cfg = apply_overrides(get_recipe(args.recipe or DEFAULT_RECIPE), args.set)
    if args.iterations is not None:
        cfg = dataclasses.replace(cfg, num_iterations=args.iterations)
    if args.checkpoint is not None:
        cfg = dataclasses.replace(
            cfg, policy=dataclasses.replace(cfg.policy, checkpoint=args.checkpoint)
        )
    if args.reward_model is not None:
        cfg = dataclasses.replace(cfg, reward_model=args.reward_model)
    cfg.validate()
    if args.resume is not None:
        out, resume = Path(args.resume), True
    else:
        out = Path(args.out or f"runs/{cfg.recipe}-{time.strftime('%Y%m%d-%H%M%S')}")
        resume = False
    if args.runner == "local":
        if args.spot_trace is not None:
            raise ValueError("--spot-trace replays preemptions on Ray: use --runner ray")
        from spotlight.run_local import run_local  # torch import: after argument checks

        run_local(cfg, out, resume=resume, device=args.device, log=sys.stdout)
        return 0
    from spotlight.job.run import run_ray

    opts = ray_options_from_args(args, cfg.recipe)
    opts.validate()
    run_ray(cfg, out, resume=resume, opts=opts, log=sys.stdout)
    return 0


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


def _pretrain(args: argparse.Namespace) -> int:
    import torch

    from spotlight.pretrain import PretrainConfig, pretrain

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
    )
    dtype = {"float32": torch.float32, "float16": torch.float16}[args.save_dtype]
    paths = pretrain(cfg, Path(args.out), device=args.device, log=sys.stdout, save_dtype=dtype)
    print(f"[pretrain] checkpoints: {', '.join(map(str, paths))}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from spotlight.config import PolicyConfig
    from spotlight.evaluate import score_prompts, write_eval
    from spotlight.policies import make_policy
    from spotlight.recipes import TASK_SAMPLER
    from spotlight.rewards import build_reward
    from spotlight.tasks import base_checkpoint, check_checkpoint_task, get_task

    task = get_task(args.task)
    checkpoint = args.checkpoint or base_checkpoint(args.task)
    check_checkpoint_task(checkpoint, task.name)  # before a model is built
    sampler = dataclasses.replace(TASK_SAMPLER, guidance_scale=args.guidance, num_steps=args.steps)
    sampler.validate()
    prompts = task.prompts("val")[: args.num_prompts]
    policy = make_policy(PolicyConfig(name="tiny", checkpoint=checkpoint), args.device)
    t0 = time.perf_counter()
    reward = build_reward(task.reward)
    scores = score_prompts(
        policy, reward, prompts, args.num_seeds, sampler, chunk=64, log=sys.stdout
    )
    extra = {"sampler": dataclasses.asdict(sampler), "seconds": time.perf_counter() - t0}
    path = write_eval(Path(args.out), task.name, checkpoint, scores, extra)
    doc = json.loads(path.read_text())
    print(
        f"[eval] {task.name}: mean reward {doc['mean_reward']:.4f} over {len(prompts)} prompts "
        f"x {args.num_seeds} seeds; {doc['frac_prompts_std_ge_0.1']:.0%} of prompts have a "
        f"reward std >= 0.1 ({extra['seconds']:.0f} s) -> {path}"
    )
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from spotlight.costs import PriceTable
    from spotlight.sim_model import LearningModel
    from spotlight.sim_report import simulate

    prices = PriceTable(
        on_demand_usd_per_gpu_h=args.on_demand_usd_per_gpu_h, spot_discount=args.spot_discount
    )
    k = args.contrast_exponent
    if args.fit_exploration:
        from spotlight.sim_model import fit_contrast_exponent

        files = ", ".join(args.fit_exploration)
        summaries = [json.loads(Path(f).read_text()) for f in args.fit_exploration]
        fit = fit_contrast_exponent(summaries)
        if fit["k"] is None:
            raise ValueError(
                f"{files}: no mode both reached the target and changed the group std, so the"
                " contrast exponent cannot be fitted from it"
            )
        k = fit["k"]
        for pt in fit["points"]:
            print(
                f"[simulate] fit: {pt['mode']}: group std x{pt['contrast_ratio']:.2f}, "
                f"{pt['speedup']:.2f}x fewer iterations to the target ({pt['reached']} reached)"
            )
        print(f"[simulate] fit: contrast exponent k = {k:.3f} (from {files})")
    learning = LearningModel(baseline_iterations=args.baseline_iterations)
    if k is not None:
        learning = dataclasses.replace(learning, contrast_exponent=k)
    changes = {
        "prompts_file": args.prompts_file,
        "rank_preservation": args.rank_correlation,
        "async_staleness_factor": args.async_staleness_factor,
        "reward_draws": args.reward_draws,
    }
    learning = dataclasses.replace(learning, **{k: v for k, v in changes.items() if v is not None})
    if args.prompts_file is not None:
        from spotlight.sim_model import EVALS

        if not (Path(args.prompts_file).exists() or (EVALS / args.prompts_file).exists()):
            shipped = ", ".join(sorted(p.name for p in EVALS.glob("eval-*.json")))
            raise ValueError(
                f"--prompts-file {args.prompts_file}: no such file (an eval.json of `spotlight"
                f" eval`, or a shipped one: {shipped})"
            )
    if args.rank_correlation is not None and not -1.0 <= args.rank_correlation <= 1.0:
        raise ValueError(f"--rank-correlation must be in [-1, 1], got {args.rank_correlation}")
    if args.async_staleness_factor is not None and not 0.0 < args.async_staleness_factor <= 1.0:
        raise ValueError(
            f"--async-staleness-factor must be in (0, 1], got {args.async_staleness_factor}"
        )
    scenario = args.scenario
    if args.explore_candidates is not None or args.explore_budget is not None:
        from spotlight.sim_model import SCENARIOS

        base = SCENARIOS[args.scenario]
        if args.explore_candidates is not None and args.explore_candidates < 2 * base.group_size:
            raise ValueError(
                f"--explore-candidates must be >= 2 x group size ({2 * base.group_size})"
            )
        if args.explore_budget is not None and args.explore_budget < 0:
            raise ValueError(f"--explore-budget must be >= 0, got {args.explore_budget}")
        scenario = dataclasses.replace(
            base,
            explore_candidates=args.explore_candidates or base.explore_candidates,
            explore_budget=args.explore_budget,
        )
    simulate(
        scenario,
        args.trace,
        Path(args.out),
        systems=args.systems,
        prices=prices,
        learning=learning,
        seed=args.seed,
        log=sys.stdout,
        trace_windows=args.trace_windows,
        workers=args.workers,
    )
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.what == "regroup":
        from spotlight.bench_regroup import run

        run(Path(args.out), args.repeats, args.checkpoint_mb, log=sys.stdout)
        return 0
    from spotlight.bench import MODES, finished_runs, plot_exploration, run_runs, summarize_runs
    from spotlight.job.cluster import connect
    from spotlight.job.options import RayOptions

    cfg = apply_overrides(get_recipe(args.recipe), args.set)
    cfg = dataclasses.replace(
        cfg,
        num_iterations=args.iterations or cfg.num_iterations,
        val_every=args.val_every or cfg.val_every,
        stop_at_val_gain=args.target_delta if args.stop_at_target else cfg.stop_at_val_gain,
        max_wall_s=args.max_wall_min * 60 if args.max_wall_min else cfg.max_wall_s,
        exploration=dataclasses.replace(
            cfg.exploration,
            budget_seeds=args.budget_seeds
            if args.budget_seeds is not None
            else cfg.exploration.budget_seeds,
        ),
    )
    cfg.validate()
    modes = args.modes or list(MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")
    opts = RayOptions(num_samplers=args.samplers, wandb=False)
    out = Path(args.out)
    name = args.name or "exploration"
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:  # what has finished so far (a bench can span sessions)
        folders = finished_runs(out, modes, args.seeds)
    else:
        connect(opts)  # one Ray for all runs
        folders = run_runs(cfg, out, modes, args.seeds, opts, log=sys.stdout)
    summary = summarize_runs(folders, args.target_delta)
    summary.update(
        recipe=cfg.recipe,
        task=cfg.task,
        iterations=cfg.num_iterations,
        seeds=args.seeds,
        val_prompts=cfg.num_val_prompts,
        val_seeds=cfg.num_val_seeds,
        val_every=cfg.val_every,
        budget_seeds=cfg.exploration.budget_seeds,
        max_candidates=cfg.exploration.max_candidates,
        stop_at_target=args.stop_at_target,
        max_wall_s=cfg.max_wall_s,
        overrides=args.set,
    )
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot_exploration(summary, out / f"{name}.png")
    for mode, m in summary["modes"].items():
        rho = m["rank_spearman_stale_fresh"]["mean"]
        print(
            f"[bench] {mode}: target reached {m['reached_target']}, final val "
            f"{m['final_val_reward_mean']:.4f}, group std {m['group_reward_std_mean']:.4f}, "
            f"zero-std groups {m['zero_std_group_share']:.1%}, "
            f"{m['wall_s_per_iteration_mean']:.1f} s/iteration"
            + (f", stale/fresh Spearman {rho:.2f}" if rho is not None else "")
        )
    print(f"[bench] -> {out / (name + '.json')}, {out / (name + '.png')}")
    return 0


def _add_price_flags(parser: argparse.ArgumentParser) -> None:
    prices = PriceTable()
    parser.add_argument(
        "--on-demand-usd-per-gpu-h",
        type=float,
        default=prices.on_demand_usd_per_gpu_h,
        help="on-demand GPU price (default: AWS p5.48xlarge per GPU, %(default)s; see"
        " spotlight/costs.py)",
    )
    parser.add_argument(
        "--spot-discount",
        type=float,
        default=prices.spot_discount,
        help="spot price = on-demand x (1 - discount) (default %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    from spotlight.job.options import RayOptions
    from spotlight.tasks import TASK_NAMES

    ray_defaults = RayOptions()  # the CLI's defaults are the dataclass's
    parser = argparse.ArgumentParser(prog="spotlight", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run Flow-GRPO training (on Ray by default)")
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
    train.add_argument(
        "--trainer-samples",
        action="store_true",
        help="the trainer workers sample rollout items while they wait for the rollout (GPU"
        " clusters: the rollout gets the trainer's GPUs too; docs/simulator.md)",
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
        default="ray",
        help="ray: the Serve/Train job (a local Ray unless RAY_ADDRESS is set); "
        "local: the single-process reference loop",
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
    pre_g = train.add_argument_group("preemptions (ray runner)")
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
    _add_price_flags(train)
    train.set_defaults(func=_train)

    pre = sub.add_parser("pretrain", help="flow-matching pretraining of a tiny base model")
    pre.add_argument("--task", required=True, choices=TASK_NAMES)
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
    pre.add_argument("--warmup-steps", type=int, default=200)
    pre.add_argument("--save-dtype", choices=["float32", "float16"], default="float32")
    pre.add_argument("--out", default="runs/pretrain", help="folder for the checkpoints")
    pre.add_argument("--device", default="cpu")
    pre.set_defaults(func=_pretrain)

    ev = sub.add_parser("eval", help="score a checkpoint on a task's validation prompts")
    ev.add_argument("--task", required=True, choices=TASK_NAMES)
    ev.add_argument("--checkpoint", help="tiny-policy checkpoint (default: the shipped base model)")
    ev.add_argument("--num-seeds", type=int, default=8, help="seeds 0..N-1 per prompt")
    ev.add_argument("--num-prompts", type=int, default=None, help="first N validation prompts")
    ev.add_argument("--guidance", type=float, default=3.0, help="classifier-free guidance")
    ev.add_argument("--steps", type=int, default=10, help="denoising steps")
    ev.add_argument("--out", required=True, help="folder for eval.json")
    ev.add_argument("--device", default="cpu")
    ev.set_defaults(func=_eval)

    from spotlight.sim_model import SCENARIOS, SYSTEMS, LearningModel

    sim = sub.add_parser("simulate", help="trace-driven cluster simulation of every system")
    sim.add_argument("--scenario", default="paper-512", choices=sorted(SCENARIOS))
    sim.add_argument(
        "--trace",
        metavar="PATH",
        help="spot capacity trace (SkyPilot .json / Oobleck .csv; a bare name finds the shipped"
        " ones; default: the scenario's)",
    )
    sim.add_argument("--out", required=True, help="folder for summary.json, report.md, plots")
    sim.add_argument("--systems", nargs="+", choices=sorted(SYSTEMS), help="default: all")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument(
        "--trace-windows",
        type=int,
        default=1,
        metavar="N",
        help="run each spot system from N evenly spaced starts of the trace; report the median"
        " window (Spotlight's) and every window's spread (default 1)",
    )
    sim.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        metavar="N",
        help="simulations run in N processes at once; the results are those of one process"
        " (default: min(2, CPUs))",
    )
    sim.add_argument(
        "--baseline-iterations",
        type=int,
        default=300,
        help="plain GRPO's iterations to the target (modelled; see spotlight/sim_model.py)",
    )
    sim.add_argument(
        "--contrast-exponent",
        type=float,
        default=None,
        help="k in progress = (group std / plain GRPO's) ** k (default: 0.549, fitted on the"
        " OCR-mini exploration benches; docs/simulator.md)",
    )
    sim.add_argument(
        "--fit-exploration",
        metavar="JSON",
        nargs="+",
        help="fit k from these exploration.json files (spotlight bench exploration), pooling"
        " their points, and use it",
    )
    learn_defaults = LearningModel()
    sim.add_argument(
        "--prompts-file",
        metavar="JSON",
        help="prompt population: per-prompt rewards of an eval.json (`spotlight eval`) or a"
        f" shipped one (default {learn_defaults.prompts_file})",
    )
    sim.add_argument(
        "--rank-correlation",
        type=float,
        help="stale/fresh Spearman of explored seeds' rewards (default"
        f" {learn_defaults.rank_preservation}, measured on OCR-mini)",
    )
    sim.add_argument(
        "--explore-candidates",
        type=int,
        help="most seeds Spotlight explores per prompt (default: the scenario's, 2 x group)",
    )
    sim.add_argument(
        "--explore-budget",
        type=int,
        help="most seeds explored per iteration (default: what the update's time allows); below"
        " prompts x candidates, the planner chooses which prompts get them",
    )
    sim.add_argument(
        "--reward-draws",
        choices=["beta_binomial", "empirical"],
        help="seed rewards: a beta-binomial fit per prompt with stale/fresh draws at the rank"
        " correlation, or the measured values resampled (capped; default"
        f" {learn_defaults.reward_draws})",
    )
    sim.add_argument(
        "--async-staleness-factor",
        type=float,
        help="progress of a one-step-stale iteration relative to on-policy (async_one_step*;"
        f" an assumption, default {learn_defaults.async_staleness_factor})",
    )
    _add_price_flags(sim)
    sim.set_defaults(func=_simulate)

    bench = sub.add_parser("bench", help="benchmarks that need real runs")
    bench.add_argument("what", choices=["exploration", "regroup"])
    bench.add_argument(
        "--out", required=True, help="folder for exploration.json and the runs / regroup.json"
    )
    bench.add_argument("--recipe", default=DEFAULT_RECIPE, choices=sorted(RECIPES))
    bench.add_argument("--iterations", type=int, help="iterations per run (default: recipe's)")
    bench.add_argument("--val-every", type=int, help="validation interval (default: recipe's)")
    bench.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    bench.add_argument("--modes", nargs="+", help="subset of off critical_path spot spot_uniform")
    bench.add_argument(
        "--target-delta", type=float, default=0.15, help="target = initial validation + this"
    )
    bench.add_argument(
        "--stop-at-target",
        action="store_true",
        help="end each run at its first validation that reaches the target",
    )
    bench.add_argument(
        "--max-wall-min", type=float, help="cap each run at this many minutes (then validate)"
    )
    bench.add_argument(
        "--budget-seeds",
        type=int,
        help="fixed exploration budget per iteration, explored in full (exploration.budget_seeds)",
    )
    bench.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field, e.g. --set num_val_seeds=2 (repeatable)",
    )
    bench.add_argument("--name", help="exploration: output file stem (default: exploration)")
    bench.add_argument(
        "--report-only",
        action="store_true",
        help="exploration: write the report from the runs already finished, run nothing",
    )
    bench.add_argument("--samplers", type=int, default=ray_defaults.num_samplers)
    bench.add_argument("--repeats", type=int, default=5, help="regroup: repetitions")
    bench.add_argument(
        "--checkpoint-mb", type=int, default=256, help="regroup: checkpoint size to load cold"
    )
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "resume", None) and getattr(args, "out", None):
        parser.error("--resume DIR continues DIR; do not also pass --out")
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as e:
        print(f"spotlight: error: {e}", file=sys.stderr)  # e.g. an --out that is a file
        return 2
    except BrokenPipeError:  # `spotlight ... | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
        return 141


if __name__ == "__main__":
    sys.exit(main())
