"""How much of a GRPO gradient is signal? Cosines between the gradients of independent batches.

python benchmarks/grpo_signal.py --recipe tiny-ocr --batches 6 --out docs/bench

The same prompts are sampled ``--batches`` times with fresh seeds (``--group`` images each),
scored, and each batch's GRPO policy gradient is computed at the recipe's starting weights (all
denoising steps, no clipping, no optimizer step). Two batches' gradients are
``g_i = mu + e_i``, with ``mu`` the true policy gradient and ``e_i`` batch noise, so

    E[g_i . g_j] = |mu|^2   (i != j),      E|g_i|^2 = |mu|^2 + s^2 / n,

where ``n`` is the batch size and ``s^2`` the per-sample noise. The script estimates both from
the mean pairwise dot product and the mean squared norm: the share of a batch gradient that is
signal (``|mu|^2 / E|g|^2``, about the expected cosine of two batches) and the batch size at
which the cosine would reach 0.5 (``s^2 / |mu|^2``). A control recomputes each gradient with the
batch's advantages shuffled at random (no signal by construction): its scatter is the noise
of the estimate. Results and what they mean: docs/tasks.md ("RL that learns: OCR-mini v2", and
the v1 section).
Writes ``grpo_signal-<recipe>[-<batch>][-<loss>][-per-step].json`` (or ``--name``); ``--set``
overrides recipe fields as ``spotlight train --set`` does (another checkpoint, sampler, loss).

``--loss awm`` measures the advantage-weighted matching objective instead (``--awm-draws``
noise draws per sample), ``--loss nft`` DiffusionNFT's (``--set grpo.nft_draws=N``).
``--per-step`` (Flow-GRPO only) also measures each
denoising step's gradient on its own: where along the trajectory the signal is.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from spotlight.bench import repo_relative
from spotlight.config import GRPO_LOSSES
from spotlight.flow.grpo import grpo_loss
from spotlight.flow.sampler import sample, step_log_prob
from spotlight.flow.sde import step_params, time_grid
from spotlight.flow.update import grpo_update
from spotlight.overrides import apply_overrides
from spotlight.policies import make_policy
from spotlight.recipes import RECIPES, get_recipe
from spotlight.rewards import build_reward
from spotlight.training.loop import prompt_sets, score_groups


def batch_gradients(policy, trajectories, advantages, cfg) -> torch.Tensor:
    """The flat GRPO gradient of one batch at the current weights (no optimizer step)."""
    grpo = dataclasses.replace(
        cfg.grpo, timestep_fraction=1.0, max_grad_norm=0.0, train_batch_size=len(trajectories)
    )
    params = policy.trainable_parameters()
    grpo_update(policy, torch.optim.SGD(params, lr=0.0), trajectories, advantages, grpo, seed=0)
    return torch.cat([p.grad.flatten() for p in params if p.grad is not None]).double()


def step_gradients(policy, trajectories, advantages, cfg, chunk: int = 32) -> list[torch.Tensor]:
    """The flat Flow-GRPO gradient of each denoising step on its own (at the current weights)."""
    sampler = trajectories[0].sampler
    grid = time_grid(sampler.num_steps, sampler.shift)
    params = policy.trainable_parameters()
    n = len(trajectories)
    out = []
    for j in range(*sampler.sde_window):  # ODE steps outside the window have no log-prob
        for p in params:
            p.grad = None
        p_j = step_params(grid, j, sampler.sde_eta)
        for lo in range(0, n, chunk):
            part = trajectories[lo : lo + chunk]
            log_prob, _ = step_log_prob(
                policy,
                torch.stack([t.xs[j] for t in part]),
                torch.stack([t.xs[j + 1] for t in part]),
                [p_j] * len(part),
                policy.encode_prompts([t.prompt for t in part]),
                sampler.guidance_scale,
            )
            old = torch.tensor([t.log_probs[j] for t in part])
            loss, _ = grpo_loss(log_prob, old, advantages[lo : lo + chunk], cfg.grpo.clip_range)
            (loss * len(part) / n).backward()
        out.append(torch.cat([p.grad.flatten() for p in params if p.grad is not None]).double())
    return out


def signal_stats(grads: list[torch.Tensor], n: int) -> dict[str, float | None]:
    """Pairwise cosines and the signal/noise split of gradients of independent batches."""
    pairs = list(itertools.combinations(range(len(grads)), 2))
    cos = [float(grads[i] @ grads[j] / grads[i].norm() / grads[j].norm()) for i, j in pairs]
    mu2 = float(np.mean([float(grads[i] @ grads[j]) for i, j in pairs]))
    total = float(np.mean([float(g @ g) for g in grads]))
    noise = total - mu2  # s^2 / n
    return {
        "cosine_mean": float(np.mean(cos)),
        "cosine_min": float(np.min(cos)),
        "cosine_max": float(np.max(cos)),
        "signal_share": mu2 / total,
        "batch_for_cosine_0.5": n * noise / mu2 if mu2 > 0 else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", default="tiny-ocr", choices=sorted(RECIPES))
    ap.add_argument("--prompts", type=int, default=8, help="training prompts per batch")
    ap.add_argument("--group", type=int, default=None, help="images per prompt (recipe's)")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--loss", choices=GRPO_LOSSES, default=None, help="(the recipe's)")
    ap.add_argument("--awm-draws", type=int, default=16, help="noise draws per sample (awm)")
    ap.add_argument(
        "--per-step", action="store_true", help="also each denoising step alone (flow_grpo)"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field, as for spotlight train (e.g. policy.checkpoint=PATH)",
    )
    ap.add_argument("--name", default=None, help="output file stem (default from the settings)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="docs/bench")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = apply_overrides(get_recipe(args.recipe), args.set)
    cfg.validate()
    if args.group:
        cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, group_size=args.group))
    if args.loss:
        grpo = dataclasses.replace(cfg.grpo, loss=args.loss, awm_draws=args.awm_draws)
        cfg = dataclasses.replace(cfg, grpo=grpo)
    if args.per_step and cfg.grpo.loss != "flow_grpo":
        ap.error("--per-step measures the Flow-GRPO steps; it needs --loss flow_grpo")
    policy = make_policy(cfg.policy, "cpu")
    reward = build_reward(cfg.reward)
    prompts = [p for p in prompt_sets(cfg)[0][: args.prompts] for _ in range(cfg.grpo.group_size)]
    n = len(prompts)
    real, shuffled, rewards = [], [], []
    steps_real: list[list[torch.Tensor]] = []
    steps_shuffled: list[list[torch.Tensor]] = []
    t0 = time.perf_counter()
    for k in range(args.batches):
        seeds = [10_000 * (k + 1) + i for i in range(n)]
        trajs = sample(policy, prompts, seeds, cfg.sampler, 0)
        r = torch.from_numpy(
            reward(policy.decode(torch.stack([t.latents for t in trajs])), prompts)
        )
        adv, stats = score_groups(r, cfg)
        adv = adv.flatten()
        rewards.append(stats["train_reward_mean"])
        real.append(batch_gradients(policy, trajs, adv, cfg))
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(k))
        shuffled.append(batch_gradients(policy, trajs, adv[perm], cfg))
        if args.per_step:
            steps_real.append(step_gradients(policy, trajs, adv, cfg))
            steps_shuffled.append(step_gradients(policy, trajs, adv[perm], cfg))
        print(
            f"[grpo-signal] batch {k + 1}/{args.batches}: reward {stats['train_reward_mean']:.3f}"
            f" |g| {real[-1].norm():.4f} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    doc = {
        "recipe": cfg.recipe,
        "checkpoint": repo_relative(cfg.policy.checkpoint),  # inside the repository: relative
        "batch_size": n,
        "prompts": args.prompts,
        "group_size": cfg.grpo.group_size,
        "batches": args.batches,
        "parameters": int(real[0].numel()),
        "batch_reward_mean": float(np.mean(rewards)),
        "real": signal_stats(real, n),
        "shuffled_advantages": signal_stats(shuffled, n),
        "loss": cfg.grpo.loss,
        "awm_draws": cfg.grpo.awm_draws if cfg.grpo.loss == "awm" else None,
        "nft_draws": cfg.grpo.nft_draws if cfg.grpo.loss == "nft" else None,
        "overrides": args.set,
        "per_step": [
            {
                "step": j,
                "t": time_grid(cfg.sampler.num_steps, cfg.sampler.shift)[j],
                "grad_norm_mean": float(np.mean([float(g[k].norm()) for g in steps_real])),
                "real": signal_stats([g[k] for g in steps_real], n),
                "shuffled_advantages": signal_stats([g[k] for g in steps_shuffled], n),
            }
            for k, j in enumerate(range(*cfg.sampler.sde_window))
        ]
        if args.per_step
        else None,
        "seconds": time.perf_counter() - t0,
        "machine": f"{platform.machine()}, {args.threads} threads",
        "command": "python benchmarks/grpo_signal.py "
        + f"--recipe {args.recipe} --prompts {args.prompts} --batches {args.batches}"
        + (f" --group {args.group}" if args.group else "")
        + (f" --loss {args.loss}" if args.loss else "")
        + (f" --awm-draws {args.awm_draws}" if cfg.grpo.loss == "awm" else "")
        + (" --per-step" if args.per_step else "")
        + "".join(f" --set {item}" for item in args.set)
        + (f" --name {args.name}" if args.name else ""),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"grpo_signal-{cfg.recipe}"
    if n != 64:
        name += f"-{n}"
    if cfg.grpo.loss != "flow_grpo":
        name += f"-{cfg.grpo.loss}"
    if args.per_step:
        name += "-per-step"
    path = out / f"{args.name or name}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for name in ("real", "shuffled_advantages"):
        s = doc[name]
        print(
            f"[grpo-signal] {name}: cosine {s['cosine_mean']:+.4f} "
            f"({s['cosine_min']:+.3f}..{s['cosine_max']:+.3f}), "
            f"signal share {s['signal_share']:+.4f}, "
            f"batch for cosine 0.5: {s['batch_for_cosine_0.5']}"
        )
    for row in doc["per_step"] or ():
        print(
            f"[grpo-signal] step {row['step']} (t {row['t']:.2f}): |g| {row['grad_norm_mean']:.4f}"
            f" cosine {row['real']['cosine_mean']:+.4f}"
            f" (shuffled {row['shuffled_advantages']['cosine_mean']:+.4f})"
        )
    print(f"[grpo-signal] -> {path}")


if __name__ == "__main__":
    main()
