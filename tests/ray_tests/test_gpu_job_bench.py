"""benchmarks/gpu_job.py on a machine without a GPU: the same Ray job with the tiny random
Qwen-Image on the CPU, unmerged then merged, and the report's fields per role."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cpu_path_writes_every_field(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "RAY_AUTH_MODE": "disabled"}
    out = tmp_path / "gpu-job"
    subprocess.run(
        [sys.executable, "benchmarks/gpu_job.py", "--out", str(out)],
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
    )
    report = json.loads((out / "gpu-job.json").read_text())
    assert report["model"] == "tiny" and report["device"] == "cpu" and report["num_gpus"] == 0
    assert report["placement"] == "CPU" and report["reward_device"] == "cpu"
    assert report["ray_start_s"] > 0 and "grpo.loss=nft" in report["overrides"]
    for name, merged in (("unmerged", False), ("merged", True)):
        run = report[name]
        assert len(run["samplers"]) == 1
        sampler = run["samplers"][0]
        assert sampler["merged"] is merged and sampler["device"] == "cpu"
        assert sampler["gpu_peak_gb"] is None and sampler["images_per_s"] > 0
        assert sampler["samples"] >= 2 * 8  # 2 iterations of 2 prompts x 4 images
        assert len(sampler["weights_broadcast_s"]) >= 2  # version 0, then the updates'
        trainer = run["trainer"]
        assert len(trainer["update_s"]) == 2 and all(s > 0 for s in trainer["update_s"])
        assert trainer["gpu_peak_gb"] is None
        assert len(run["iteration_s"]) == 2 and all(s > 0 for s in run["iteration_s"])
        assert [r["iteration"] for r in run["iterations"]] == [0, 1]
