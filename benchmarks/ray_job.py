"""The Ray job against the single-process loop on this machine: time per iteration, start-up,
weights pick-up, peak memory of everything the run started.

python benchmarks/ray_job.py --out docs/bench       # writes ray_job.json and prints a summary

Both runs use the same recipe and seeds, exploration off (the single-process loop has none),
with validation only after the last iteration; the
time per iteration is the median over iterations 2..N-1 (the first warms up, the last
validates). Memory is the peak of the summed PSS (proportional set size: shared pages, such as
torch's libraries and Ray's object store, split among the processes that map them, so the sum
is what the machine holds) of this process and all its children (the local Ray's processes
are children of the driver), sampled every 0.5 s in separate, shorter runs: reading every
process's page map costs enough CPU on 2 cores to distort the timings.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil

from spotlight.recipes import get_recipe


class PeakPss:
    """Peak summed PSS of this process tree while in the ``with`` block (Linux)."""

    def __init__(self, every_s: float = 0.5):
        self.every_s = every_s
        self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_full_info().pss
            self.peak = max(self.peak, total)
            self._stop.wait(self.every_s)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def per_iteration_s(run_dir: Path) -> list[float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    walls = [r["wall_s"] for r in rows]
    return [b - a for a, b in itertools.pairwise(walls[:-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="tiny-ocr")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--memory-iterations", type=int, default=3)
    ap.add_argument("--out", default="docs/bench")
    args = ap.parse_args()
    recipe = get_recipe(args.recipe)
    cfg = dataclasses.replace(  # exploration off: the single-process loop has none
        recipe,
        num_iterations=args.iterations,
        val_every=10**6,
        exploration=dataclasses.replace(recipe.exploration, mode="off"),
    )
    result: dict = {"recipe": args.recipe, "iterations": args.iterations}
    with tempfile.TemporaryDirectory() as tmp:
        from spotlight.training.run_local import run_local

        t0 = time.perf_counter()
        run_local(cfg, Path(tmp) / "local")
        local = per_iteration_s(Path(tmp) / "local")
        loc_rows = [
            json.loads(x) for x in (Path(tmp) / "local" / "metrics.jsonl").read_text().splitlines()
        ]
        result["local"] = {
            "total_s": time.perf_counter() - t0,
            "sample_s_median": statistics.median(r["sample_s"] for r in loc_rows),
            "train_s_median": statistics.median(r["train_s"] for r in loc_rows),
            "iteration_s_median": statistics.median(local),
            "iteration_s": local,
        }
        print(f"local: {statistics.median(local):.2f} s/iteration")

        from spotlight.job.options import RayOptions
        from spotlight.job.run import run_ray

        t0 = time.perf_counter()
        run_ray(cfg, Path(tmp) / "ray", opts=RayOptions(wandb=False))
        ray_dir = Path(tmp) / "ray"
        rows = [json.loads(x) for x in (ray_dir / "metrics.jsonl").read_text().splitlines()]
        its = per_iteration_s(ray_dir)
        loads = [r["weights_load_s_max"] for r in rows if r["weights_load_s_max"] > 0]
        total = time.perf_counter() - t0
        result["ray"] = {
            "total_s": total,
            "startup_s": total - rows[-1]["wall_s"],
            "iteration_s_median": statistics.median(its),
            "iteration_s": its,
            "sample_s_median": statistics.median(r["sample_s"] for r in rows),
            "train_s_median": statistics.median(r["train_s"] for r in rows),
            "trainer_update_s_median": statistics.median(r["trainer_update_s"] for r in rows),
            "weights_load_s_median": statistics.median(loads) if loads else None,
            "cost_usd": rows[-1]["cost_usd"],
            "util_spot": rows[-1]["util_spot"],
            "util_on_demand": rows[-1]["util_on_demand"],
        }
        short = dataclasses.replace(cfg, num_iterations=args.memory_iterations)
        with PeakPss() as mem:
            run_local(short, Path(tmp) / "local-mem")
        result["local"]["peak_pss_gb"] = mem.peak / 1e9
        with PeakPss() as mem:
            run_ray(short, Path(tmp) / "ray-mem", opts=RayOptions(wandb=False))
        result["ray"]["peak_pss_gb"] = mem.peak / 1e9
    r, loc = result["ray"], result["local"]
    result["overhead"] = r["iteration_s_median"] / loc["iteration_s_median"] - 1
    result["machine"] = {"cpus": psutil.cpu_count(), "platform": platform.platform()}
    print(
        f"ray: {r['iteration_s_median']:.2f} s/iteration ({result['overhead']:+.0%} vs local), "
        f"start-up {r['startup_s']:.0f} s, weights pick-up {r['weights_load_s_median']} s, "
        f"peak {r['peak_pss_gb']:.2f} GB (local loop {loc['peak_pss_gb']:.2f} GB)"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ray_job.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
