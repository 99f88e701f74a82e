"""CPU throughput of the model rewards (ocr-model, geneval-model) on their tiny random configs.

The tiny configs are the tests' (tests/tiny_hf): the real classes (GOT-OCR 2.0, Mask2Former,
CLIP) at a few layers of width 16-32, so the figure measures the reward's own code path
(processor, batched forward or generate, post-processing, the rules) rather than a real model's
compute; the real models' cost on a GPU is in docs/cluster.md. One torch thread, nothing else
running::

    python benchmarks/reward_models.py --out docs/bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tiny_hf.geneval_models import save_tiny_geneval_models
from tiny_hf.got_ocr import save_tiny_ocr_model

from spotlight.rewards import build_reward
from spotlight.tasks import get_task


def _time(reward, images: np.ndarray, prompts: list[str], repeats: int) -> dict[str, float]:
    reward(images, prompts)  # warm-up: lazy inits, first-call allocations
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = reward(images, prompts)
        times.append(time.perf_counter() - t0)
    assert out.shape == (len(images),) and out.dtype == np.float32
    best, median = min(times), statistics.median(times)
    return {
        "images": len(images),
        "repeats": repeats,
        "median_s": median,
        "best_s": best,
        "images_per_s_median": len(images) / median,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/bench")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.images, args.size, args.size, 3), dtype=np.uint8)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "ocr-model": save_tiny_ocr_model(Path(tmp) / "ocr"),
            "geneval-model": save_tiny_geneval_models(Path(tmp) / "geneval"),
        }
        for name, task in (("ocr-model", "ocr"), ("geneval-model", "geneval")):
            prompts = get_task(task).prompts("val")[: args.images]
            reward = build_reward(name, str(folders[name]))
            results[name] = _time(reward, images, prompts, args.repeats)
            r = results[name]
            print(
                f"{name}: {r['images_per_s_median']:.1f} images/s (median of {args.repeats},"
                f" {args.images} images of {args.size}x{args.size}, 1 thread)"
            )
    doc = {
        "command": "python benchmarks/reward_models.py " + " ".join(sys.argv[1:]),
        "torch_threads": 1,
        "image_size": args.size,
        "note": "tiny random configs of the real classes (tests/tiny_hf): the code path's cost",
        "rewards": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reward_models_tiny.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
