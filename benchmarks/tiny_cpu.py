"""Benchmark the tiny policy on this CPU: sampling images/s by batch size, seconds per GRPO update.

python benchmarks/tiny_cpu.py --out docs/bench      # writes tiny_cpu.json and prints a table
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import group_advantages
from spotlight.flow.sampler import sample
from spotlight.flow.update import grpo_update
from spotlight.policies.tiny import TinyConfig, TinyPolicy
from spotlight.prompts import word_prompts


def time_it(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_sampling(policy, batch_sizes, num_steps, repeats):
    rows = []
    for bs in batch_sizes:
        cfg = SamplerConfig(num_steps=num_steps, batch_size=bs)
        prompts = word_prompts(bs, seed=bs)
        times = time_it(
            lambda cfg=cfg, prompts=prompts: sample(
                policy, prompts, list(range(len(prompts))), cfg
            ),
            repeats,
        )
        med = statistics.median(times)
        rows.append(
            {
                "batch_size": bs,
                "num_steps": num_steps,
                "median_s": med,
                "images_per_s": bs / med,
                "min_s": min(times),
                "max_s": max(times),
            }
        )
        print(
            f"sampling  batch {bs:>3}: {bs / med:7.2f} images/s  ({med:.3f} s per batch of "
            f"{num_steps} steps)",
            flush=True,
        )
    return rows


def bench_update(policy, num_prompts, group, num_steps, fraction, repeats):
    cfg = SamplerConfig(num_steps=num_steps, batch_size=8)
    prompts = [p for p in word_prompts(num_prompts, seed=0) for _ in range(group)]
    trajs = sample(policy, prompts, list(range(len(prompts))), cfg)
    adv = group_advantages(
        torch.randn(num_prompts, group, generator=torch.Generator().manual_seed(0))
    )
    grpo = GRPOConfig(group_size=group, timestep_fraction=fraction, train_batch_size=16)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    times = time_it(lambda: grpo_update(policy, opt, trajs, adv, grpo, seed=0), repeats)
    med = statistics.median(times)
    n_fwd = len(trajs) * max(1, round(fraction * num_steps))
    print(
        f"GRPO update: {med:.2f} s for {len(trajs)} samples x "
        f"{max(1, round(fraction * num_steps))} steps ({n_fwd / med:.1f} sample-steps/s fwd+bwd)"
    )
    return {
        "num_samples": len(trajs),
        "num_train_steps": max(1, round(fraction * num_steps)),
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "sample_steps_per_s": n_fwd / med,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/bench")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    policy = TinyPolicy(TinyConfig(), seed=0)
    n_params = sum(p.numel() for p in policy.parameters())
    print(
        f"tiny policy: {n_params / 1e6:.2f} M parameters, {args.threads} threads, "
        f"torch {torch.__version__}"
    )
    result = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": args.threads,
            "torch": torch.__version__,
        },
        "model": {"params": n_params, **TinyConfig().__dict__},
        "sampling": bench_sampling(policy, [1, 4, 8, 16, 32], 10, args.repeats),
        "update": bench_update(policy, 4, 8, 10, 0.5, args.repeats),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tiny_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'tiny_cpu.json'}")


if __name__ == "__main__":
    main()
