"""The Ray job on this machine's GPUs: 2 iterations of ``qwen-image-ocr-512`` at full size with
random weights, placed by the one-machine GPU plan, sampled unmerged and then with the LoRA
merged (``--merge-lora``); per role its device, peak GPU memory and timings.

    python benchmarks/gpu_job.py --out DIR       # writes DIR/gpu-job.json

The model is Qwen-Image's architecture with random bf16 weights (policy option
``random_weights``, spotlight/policies/qwen_random.py; nothing is downloaded), the update
DiffusionNFT's (``recipes.NFT_OVERRIDES``: merged sampling needs an update that reads no
sampler log-probs), the batch cut as in ``gpu_qwen_image_recipe.py`` (2 prompts x 4 images),
reward ``brightness`` on the CPU (no OCR model on a benchmark machine), exploration off,
validation on 1 prompt. Roles: :func:`spotlight.scheduling.gpu_placement.default_counts` for
the GPUs found (one GPU: one sampler replica and one trainer worker share it). Without a GPU it
runs the same job with a tiny random Qwen-Image on the CPU (the CI test), so the script cannot
rot between GPU runs.

Per run (unmerged, merged): sampling images/s of each replica (samples over its time in the
denoising loop), its peak GPU memory and weights loads (the broadcast: fetch, verify, load,
merge), the trainer's update seconds and peak GPU memory, each iteration's seconds; and the
Ray start.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPE = "qwen-image-ocr-512"
CUT = (
    "reward=brightness",
    "exploration.mode=off",
    "num_prompts_per_iteration=2",
    "grpo.group_size=4",
    "num_val_prompts=1",
    "num_val_seeds=1",
    "val_every=1000",
)
TINY = {"height": 64, "width": 64, "lora_rank": 4, "lora_alpha": 8}
"""The tiny model's policy options on the CPU."""
STATUS_CALLS = 8
"""Status calls per replica to reach every replica through the Serve handle."""


def job_config(tiny: bool, iterations: int):
    from spotlight.overrides import apply_overrides
    from spotlight.recipes import NFT_OVERRIDES, get_recipe

    sets = [*NFT_OVERRIDES, *CUT, f"num_iterations={iterations}"]
    cfg = apply_overrides(get_recipe(RECIPE), sets)
    options = {**cfg.policy.options, "random_weights": "tiny" if tiny else "full"}
    if tiny:
        options.update(TINY)
    cfg = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, options=options))
    cfg.validate()
    return cfg, sets


def start_ray(opts) -> float:
    """A local Ray with the job's resources (all GPUs); returns its start seconds."""
    import ray

    from spotlight.actors.names import NAMESPACE
    from spotlight.job.cluster import JOB_ENV
    from spotlight.job.options import local_resources

    t0 = time.perf_counter()
    ray.init(
        address="local",
        num_cpus=opts.num_samplers + opts.num_train_workers + 2,
        resources=local_resources(opts),
        namespace=NAMESPACE,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        runtime_env={"env_vars": dict(JOB_ENV)},
    )
    return time.perf_counter() - t0


def replica_statuses(num_samplers: int) -> list[dict[str, Any]]:
    """Every sampler replica's ``status()`` (through the Serve handle, by worker id)."""
    from ray import serve

    from spotlight.actors import names

    handle = serve.get_app_handle(names.SERVE_APP)
    seen: dict[str, dict] = {}
    for _ in range(STATUS_CALLS * num_samplers):
        status = handle.status.remote().result()
        seen[status["worker_id"]] = status
    return list(seen.values())


def run_variant(cfg, opts, out_dir: Path) -> dict[str, Any]:
    """One Ray job (``opts.merge_lora`` or not); its figures per role."""
    from spotlight.job.cluster import cleanup
    from spotlight.job.run import run_ray

    t0 = time.perf_counter()
    run_ray(cfg, out_dir, opts=opts, log=sys.stdout)
    job_s = time.perf_counter() - t0
    replicas = replica_statuses(opts.num_samplers)
    cleanup()
    rows = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines() if x]
    walls = [r["wall_s"] for r in rows]
    return {
        "job_s": round(job_s, 2),
        "samplers": [
            {
                "device": r["device"],
                "merged": r["merged"],
                "gpu_peak_gb": _round(r["gpu_peak_gb"]),
                "samples": r["samples"],
                "images_per_s": round(r["samples"] / max(r["sampling_s"], 1e-9), 3),
                "weights_broadcast_s": [round(s, 3) for s in r["weights_load_s"]],
            }
            for r in replicas
        ],
        "trainer": {
            "update_s": [round(r["trainer_update_s"], 3) for r in rows],
            "gpu_peak_gb": _round(max((r.get("loss/gpu_peak_gb") or 0) for r in rows) or None),
        },
        "iterations": [
            {
                "iteration": r["iteration"],
                "sample_s": round(r["sample_s"], 3),
                "update_s": round(r["trainer_update_s"], 3),
                "weights_load_s_max": round(r["weights_load_s_max"], 3),
            }
            for r in rows
        ],
        "iteration_s": [round(b - a, 3) for a, b in zip([0.0, *walls], walls, strict=False)],
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def run(out: Path, iterations: int) -> dict[str, Any]:
    import ray
    import torch

    from spotlight.job.options import RayOptions
    from spotlight.job.placement import cuda_machine, gpu_ask, local_gpu_plan
    from spotlight.scheduling.gpu_placement import default_counts

    machine = cuda_machine()
    gpu = machine.num_gpus > 0
    cfg, sets = job_config(not gpu, iterations)
    trainers, samplers = default_counts(machine.num_gpus, False) if gpu else (1, 1)
    base = RayOptions(
        num_samplers=samplers,
        num_train_workers=trainers,
        trainer_threads=1,
        device="cuda" if gpu else "cpu",
        wandb=False,
        keep_cluster_state=True,  # the replicas' status is read after the run
    )
    report: dict[str, Any] = {
        "command": f"python benchmarks/gpu_job.py --out {out.name}",
        "recipe": RECIPE,
        "model": "full" if gpu else "tiny",
        "overrides": sets,
        "device": torch.cuda.get_device_name(0) if gpu else "cpu",
        "num_gpus": machine.num_gpus,
        "gpu_memory_gb": _round(machine.gpu_memory_gb),
        "torch": torch.__version__,
    }
    plan = local_gpu_plan(cfg, base) if gpu else None  # refuses what cannot fit, first
    report["placement"] = plan.layout() if plan else "CPU"
    report["memory_asked_gb"] = gpu_ask(cfg, base).memory_gb
    report["reward_device"] = "cpu"  # brightness: no model
    report["ray_start_s"] = round(start_ray(base), 2)
    t0 = time.perf_counter()
    try:
        for name, merged in (("unmerged", False), ("merged", True)):
            opts = dataclasses.replace(base, merge_lora=merged)
            report[name] = run_variant(cfg, opts, out / name)
    finally:
        ray.shutdown()
    report["jobs_s"] = round(time.perf_counter() - t0, 2)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder: gpu-job.json, run folders")
    ap.add_argument("--iterations", type=int, default=2)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        report = run(args.out, args.iterations)
    except ValueError as e:  # the placement refused this machine
        print(f"gpu_job: {e}", file=sys.stderr)
        return 2
    (args.out / "gpu-job.json").write_text(json.dumps(report, indent=1))
    print(f"[gpu-job] -> {args.out / 'gpu-job.json'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
