"""Benchmark the OCR reward: accuracy of preprocessing and Tesseract options, images/s by backend.

python benchmarks/ocr_reward.py --out docs/bench     # writes ocr_reward.json and prints tables

Accuracy is the mean reward on 32x64 renders of random 3-letter uppercase words (clean at font
sizes 20 and 16, degraded by blur and noise, inverted RGB), on uniform noise, on a render of
another word, and on the OCR-mini task's own renders (random size, position and contrast).
Throughput is wall-clock images/s of the whole reward call (preprocessing included) and CPU
seconds per image (this process and its children), median of --repeats runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import string
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from spotlight.rewards.ocr import UPPERCASE, OcrReward, available_cpus, render_text

PREPROCESS = [(1, "nearest"), (2, "nearest"), (4, "nearest"), (2, "bicubic"), (3, "bicubic")]
PREPROCESS += [(4, "bicubic"), (4, "lanczos"), (6, "bicubic")]
OPTIONS: list[dict] = [
    {"psm": 7},
    {"psm": 8},
    {"psm": 13},
    {"psm": 7, "whitelist": UPPERCASE},
    {"psm": 7, "min_confidence": 30.0},
    {"psm": 7, "min_confidence": 60.0},
    {"border": 2},
    {"border": 16},
]


def words(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_uppercase) for _ in range(3)) for _ in range(n)]


def degrade(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Blur (radius 0.8) and Gaussian noise (sigma 16): closer to what a small model draws."""
    blurred = Image.fromarray(image[..., 0]).filter(ImageFilter.GaussianBlur(0.8))
    noisy = np.asarray(blurred, np.float64) + rng.normal(0.0, 16.0, blurred.size[::-1])
    return np.clip(noisy, 0, 255).astype(np.uint8)[..., None]


def image_sets(n: int, seed: int) -> tuple[list[str], dict[str, np.ndarray]]:
    """Words, and named batches of images of them (or of noise, or of other words)."""
    ws, rng = words(n, seed), np.random.default_rng(seed)
    clean = np.stack([render_text(w) for w in ws])
    inverted = np.stack([render_text(w, ink=230, paper=30) for w in ws])
    sets = {
        "clean20": clean,
        "clean16": np.stack([render_text(w, size=16) for w in ws]),
        "degraded": np.stack([degrade(im, rng) for im in clean]),
        "inverted_rgb": np.repeat(inverted, 3, axis=-1),
        "noise": rng.integers(0, 256, clean.shape, dtype=np.uint8),
        "wrong_word": np.roll(clean, 1, axis=0),
    }
    return ws, sets


def task_renders(n: int, seed: int) -> tuple[list[str], np.ndarray] | None:
    """Prompts and renders of the OCR-mini task's training distribution, if that task exists."""
    try:
        from spotlight.tasks.ocr_mini import OcrMini
    except ImportError:
        return None
    task, rng = OcrMini(), np.random.default_rng(seed)
    prompts = task.prompts("train")[:n]
    return prompts, np.stack([task.render(p, rng) for p in prompts])


def score_sets(
    reward: OcrReward, ws: list[str], sets: dict[str, np.ndarray], task: tuple | None = None
) -> dict[str, float]:
    prompts = [f'a sign that says "{w}"' for w in ws]
    out = {name: float(reward(images, prompts).mean()) for name, images in sets.items()}
    if task is not None:
        out["ocr_mini_task"] = float(reward(task[1], task[0]).mean())
    return out


def bench_accuracy(n: int, seed: int) -> list[dict]:
    (ws, sets), task = image_sets(n, seed), task_renders(4 * n, seed)
    rows = []
    configs = [{"scale": s, "resample": r} for s, r in PREPROCESS] + OPTIONS
    names = [*sets, *(["ocr_mini_task"] if task else [])]
    print(f"\nmean reward over {n} words ({4 * n} OCR-mini renders), {_fast_backend()} backend")
    print(f"{'options':<40}" + "".join(f"{name:>14}" for name in names))
    for config in configs:
        with OcrReward(backend=_fast_backend(), **config) as reward:
            scores = score_sets(reward, ws, sets, task)
        label = ", ".join(f"{k}={v if k != 'whitelist' else 'A-Z'}" for k, v in config.items())
        print(f"{label:<40}" + "".join(f"{v:>14.3f}" for v in scores.values()), flush=True)
        rows.append({"options": {**config}, **scores})
    return rows


def _fast_backend() -> str:
    return "tesserocr" if importlib.util.find_spec("tesserocr") else "cli"


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def time_calls(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of ``fn`` after one warm-up call."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t0 = cpu_seconds(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu_seconds() - c0)
    return statistics.median(walls), statistics.median(cpus)


def per_image_cli(reward: OcrReward) -> Callable[[np.ndarray, list[str]], list[str]]:
    """The naive baseline: one ``tesseract`` process per image, ``reward.workers`` at a time."""

    def read(images: np.ndarray, prompts: list[str]) -> list[str]:
        with ThreadPoolExecutor(reward.workers) as pool:
            return [t for out in pool.map(reward.read, [im[None] for im in images]) for t in out]

    return read


def bench_throughput(batches: list[int], workers: list[int], repeats: int) -> list[dict]:
    backends = ["tesserocr", "cli", "cli-per-image"]
    if importlib.util.find_spec("tesserocr") is None:
        backends.remove("tesserocr")
    ws, sets = image_sets(max(batches), seed=1)
    rows = []
    print(f"\nthroughput, load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'backend':<15}{'workers':>8}{'batch':>7}{'images/s':>10}{'CPU ms/image':>14}")
    for backend in backends:
        for n_workers in workers:
            reward = OcrReward(backend=backend.removesuffix("-per-image"), workers=n_workers)
            call = per_image_cli(reward) if backend.endswith("per-image") else reward
            for batch in batches[:1] if backend.endswith("per-image") else batches:
                images, prompts = sets["clean20"][:batch], [f'"{w}"' for w in ws[:batch]]
                wall, cpu = time_calls(lambda: call(images, prompts), repeats)  # noqa: B023
                row = {"backend": backend, "workers": n_workers, "batch": batch}
                row |= {"images_per_s": batch / wall, "cpu_ms_per_image": 1e3 * cpu / batch}
                print(
                    f"{backend:<15}{n_workers:>8}{batch:>7}{row['images_per_s']:>10.1f}"
                    f"{row['cpu_ms_per_image']:>14.2f}",
                    flush=True,
                )
                rows.append(row)
            reward.close()
    return rows


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()}
    out["cpus_available"] = str(available_cpus())
    out["tesseract_cli"] = os.popen("tesseract --version 2>&1").readline().strip()
    if importlib.util.find_spec("tesserocr"):
        import tesserocr

        out["tesserocr"] = tesserocr.__version__
        out["tesserocr_libtesseract"] = tesserocr.tesseract_version().splitlines()[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/bench")
    ap.add_argument("--words", type=int, default=128, help="words per accuracy set")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args()
    result: dict = {"versions": versions(), "load_average_start": os.getloadavg()[0]}
    print(json.dumps(result["versions"]))
    if not args.skip_accuracy:
        result["accuracy"] = bench_accuracy(args.words, seed=0)
    result["throughput"] = bench_throughput(args.batches, args.workers, args.repeats)
    result["load_average_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ocr_reward.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'ocr_reward.json'}")


if __name__ == "__main__":
    main()
