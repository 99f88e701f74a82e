"""What a larger tiny policy costs on this CPU: pretraining samples/s and sampling images/s.

python benchmarks/tiny_arch.py --task geneval-mini --out docs/bench

For each architecture (the task's default model and the ``--arch`` variants below, each a set
of TinyConfig fields), it times pretraining steps of ``--batch-size`` samples (the loss,
backward and AdamW step of ``spotlight pretrain``, on pre-rendered images so that the renderer
is not timed) and the task recipes' sampling (10 steps, guidance 3: two forwards a step) of
``--sample-batch`` images; medians of ``--repeats``. Writes ``tiny-arch-<task>.json``. Run it
with nothing else on the machine: it measures time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_cpu import time_it

from spotlight.flow.sampler import sample
from spotlight.policies.tiny import TinyPolicy
from spotlight.recipes import TASK_SAMPLER
from spotlight.tasks import get_task
from spotlight.training.pretrain import PretrainConfig, RenderedPrompts, _Trainee, task_model_config

VARIANTS = {
    "default": {},
    "patch2": {"patch": 2},
    "layers8": {"num_layers": 8},
    "wide8x32": {"num_heads": 8},
    "layers8-wide8x32": {"num_layers": 8, "num_heads": 8},
    "patch2-layers6": {"patch": 2, "num_layers": 6},
}


def median_seconds(fn, repeats: int) -> float:
    return statistics.median(time_it(fn, repeats))


def measure(task_name: str, arch: dict[str, int], batch: int, sample_batch: int, repeats: int):
    task = get_task(task_name)
    cfg = PretrainConfig(task=task_name, batch_size=batch, num_samples=batch, arch=arch)
    run = _Trainee.start(cfg, task_model_config(task, **arch), "cpu")
    data = RenderedPrompts(task, 0, batch)
    prompts, images = zip(*(data[i] for i in range(batch)), strict=True)
    x0 = torch.stack(images)
    step_s = median_seconds(lambda: run.step(cfg, 10, 1000, list(prompts), x0), repeats)
    policy = TinyPolicy(run.policy.config, seed=0)
    names = task.prompts("val")[:sample_batch]
    sampler = dataclasses.replace(TASK_SAMPLER, batch_size=sample_batch)
    sample_s = median_seconds(
        lambda: sample(policy, names, list(range(len(names))), sampler), repeats
    )
    return {
        "arch": arch,
        "config": dataclasses.asdict(run.policy.config),
        "parameters": sum(p.numel() for p in run.policy.parameters()),
        "tokens": (task.height // run.policy.config.patch)
        * (task.width // run.policy.config.patch),
        "pretrain_samples_per_s": batch / step_s,
        "sampling_images_per_s": len(names) / sample_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="geneval-mini")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--sample-batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="runs/tiny-arch")
    args = ap.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)
    rows = {}
    for name in args.variants:
        rows[name] = measure(
            args.task, VARIANTS[name], args.batch_size, args.sample_batch, args.repeats
        )
        r = rows[name]
        print(
            f"{name:18s} {r['parameters'] / 1e6:5.2f} M params {r['tokens']:4d} tokens  "
            f"pretrain {r['pretrain_samples_per_s']:6.1f} samples/s  "
            f"sampling {r['sampling_images_per_s']:6.1f} images/s",
            flush=True,
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "python benchmarks/tiny_arch.py "
        + " ".join(
            f"--task {args.task} --batch-size {args.batch_size} --sample-batch "
            f"{args.sample_batch} --repeats {args.repeats}".split()
        ),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
        },
        "task": args.task,
        "variants": rows,
    }
    path = out / f"tiny-arch-{args.task}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
