"""Two iterations of a Qwen-Image recipe's code path on one GPU, at full model size with random
bf16 weights and a cut batch: wall time, peak GPU memory and a sampler's first-item latency.

    python benchmarks/gpu_qwen_image_recipe.py --out OUT.json [--recipe qwen-image-ocr-512]
        [--set num_prompts_per_iteration=2 --set grpo.group_size=4 ...]
    python benchmarks/gpu_qwen_image_recipe.py --out OUT.json --tiny   # the same path on a CPU

The model is Qwen-Image's architecture with random weights (nothing is downloaded; the real
weights are 58 GB and the timings do not depend on their values): diffusers'
``QwenImageTransformer2DModel`` and ``AutoencoderKLQwenImage`` at their default (Qwen-Image's)
configs, Qwen2.5-VL 7B as the text encoder, and a small byte-level tokenizer trained here (its
ids are valid for the full vocabulary). ``QwenImagePolicy`` wraps them with the recipe's LoRA,
and ``ReferenceLoop`` (what ``spotlight train --runner local`` runs) samples, decodes, scores and
updates, as every Ray worker does with the same functions. The reward is ``brightness`` unless
``--set reward=...`` names another: the OCR and GenEval models are not on the benchmark machine.
Exploration is off (the local loop does not explore).

Phases, each timed with the GPU synchronized and its peak memory read from
``torch.cuda.max_memory_allocated``: ``build`` (random weights on the GPU, LoRA added),
``first_item`` (one sampler item of ``sampler.batch_size`` samples from cold: text encoding,
the first kernels), ``warm_item`` (the same item again), with ``--lora-ablation``
``warm_item_adapters_off`` (the item with the LoRA adapters disabled), and each iteration.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from spotlight.policies.qwen_random import random_pipeline

REPO = Path(__file__).resolve().parents[1]

CUT_BATCH = ("num_prompts_per_iteration=2", "grpo.group_size=4")
"""The default cut: 2 prompts x 4 images an iteration (8 samples, one sampler item at 512)."""


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Phases:
    """Wall time and peak GPU memory of named phases."""

    def __init__(self, device: str):
        self.device = device
        self.rows: dict[str, dict[str, float]] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        cuda = self.device.startswith("cuda")
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        _sync(self.device)
        t0 = time.perf_counter()
        yield
        _sync(self.device)
        row = {"wall_s": round(time.perf_counter() - t0, 3)}
        if cuda:
            row["peak_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
            row["allocated_gb"] = round(torch.cuda.memory_allocated() / 1e9, 2)
        self.rows[name] = row
        print(f"[gpu-recipe] {name}: {row}", flush=True)


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from spotlight.flow.sampler import sample
    from spotlight.overrides import apply_overrides
    from spotlight.policies.qwen_image import QwenImagePolicy
    from spotlight.recipes import get_recipe
    from spotlight.rewards import build_reward
    from spotlight.training.loop import ReferenceLoop, iteration_batch, prompt_sets

    device = "cpu" if args.tiny else "cuda"
    dtype = torch.float32 if args.tiny else torch.bfloat16
    sets = ["reward=brightness", "exploration.mode=off", *CUT_BATCH, *args.set]
    sets.append(f"num_iterations={args.iterations}")
    cfg = apply_overrides(get_recipe(args.recipe), sets)
    cfg.validate()
    opts = dict(cfg.policy.options)
    if args.tiny:
        opts.update(height=64, width=64, lora_rank=4, lora_alpha=8)
    phases = Phases(device)
    with tempfile.TemporaryDirectory() as tmp, phases.phase("build"):
        pipe = random_pipeline(device, dtype, args.tiny, Path(tmp))
        policy = QwenImagePolicy(pipe, lora_seed=cfg.policy.init_seed, **opts).to(device)
    sizes = {
        "transformer_params": _params(policy.transformer),
        "text_encoder_params": _params(policy.text_encoder),
        "vae_params": _params(policy.vae),
        "lora_params": sum(p.numel() for p in policy.trainable_parameters()),
    }
    print(f"[gpu-recipe] {sizes}", flush=True)
    loop = ReferenceLoop(cfg, policy, build_reward(cfg.reward))
    train, _ = prompt_sets(cfg)
    prompts, seeds = iteration_batch(cfg, train, 0)
    b = cfg.sampler.batch_size
    item = (prompts[:b], seeds[:b])
    with phases.phase("first_item"):
        first = sample(policy, *item, cfg.sampler)
    with phases.phase("warm_item"):
        sample(policy, *item, cfg.sampler)
    finite = bool(torch.isfinite(torch.stack([tr.latents for tr in first])).all())
    if args.lora_ablation:  # the same item with the adapters off: what LoRA costs a step
        policy.transformer.disable_adapters()
        with phases.phase("warm_item_adapters_off"):
            sample(policy, *item, cfg.sampler)
        policy.transformer.enable_adapters()
    rows = []
    for it in range(args.iterations):
        with phases.phase(f"iteration_{it}"):
            row = loop.run_iteration(it)
        rows.append({k: v for k, v in row.items() if isinstance(v, int | float | str)})
    samples = len(prompts)
    warm = phases.rows["warm_item"]["wall_s"]
    steps = cfg.sampler.num_steps
    return {
        "command": _command(args.out),
        "recipe": args.recipe,
        "overrides": sets,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "image_size": [opts["height"], opts["width"]],
        "sampler": {
            "batch_size": b,
            "num_steps": steps,
            "guidance_scale": cfg.sampler.guidance_scale,
        },
        "samples_per_iteration": samples,
        **sizes,
        "phases": phases.rows,
        "warm_item_s_per_sample_step": round(warm / (b * steps), 4),
        "first_item_latents_finite": finite,
        "iterations": rows,
    }


def _command(out: Path) -> str:
    """This run's command line, ``--out`` as a path in the repository or as its file name."""
    out = out.resolve()
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else Path(out.name)
    argv = [shown.as_posix() if Path(a).resolve() == out else a for a in sys.argv[1:]]
    return " ".join(["python benchmarks/gpu_qwen_image_recipe.py", *argv])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the report (JSON)")
    ap.add_argument("--recipe", default="qwen-image-ocr-512")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--tiny", action="store_true", help="tiny random configs on the CPU")
    ap.add_argument(
        "--lora-ablation", action="store_true", help="also time the item with LoRA disabled"
    )
    args = ap.parse_args()
    if not args.tiny and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --tiny for the CPU check)", file=sys.stderr)
        return 2
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"[gpu-recipe] -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
