"""Does RL raise a task's validation reward? Training seeds against a shuffled-advantage control.

python benchmarks/learn.py --recipe tiny-ocr --seeds 0 1 2 --control-seeds 0 --out docs/bench

Each run is ``spotlight train --runner local`` of the recipe with ``seed=S`` and
``exploration.mode=off`` (plain GRPO: random seeds) (``mode`` train), or
the same with ``grpo.shuffle_advantages=true`` (``mode`` control: the update keeps its size and
noise, the advantages lose their link to the images). Every run scores the same validation
prompts with the same fixed seeds before and after training, so ``initial_val_reward`` is the
base model's score on exactly what ``final_val_reward`` is scored on. The runs go to
``--runs/<mode>-<seed>``; a re-run reuses finished runs and resumes unfinished ones, so the
bench can be stopped and run again. Writes ``learn-<task>.json``: ``task``, ``recipe``,
``val_prompts``, ``val_seeds`` and ``runs`` (``seed``, ``mode``, ``initial_val_reward``,
``final_val_reward``, ``gain``, ``wall_s``, ``command``, its paths inside the repository
relative to it; ``val_curve``: [iteration, validation reward] pairs; ``config``: the config
it ran), the mean gain of the training runs, and the validation curves as ``learn-<task>.png``
(``--name`` names them otherwise, for a reward variant). The report is written after every run,
and a re-run reuses the records of the report already at ``--out`` whose config is the one it
would run: a bench can span machines whose run folders are not kept, as long as its report is.
One run at a time: the wall times are only comparable with nothing else running. Results:
docs/tasks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from spotlight.bench import repo_relative, reusable_record
from spotlight.config import Config
from spotlight.overrides import apply_overrides
from spotlight.recipes import RECIPES, get_recipe


def run_sets(args: argparse.Namespace, seed: int, mode: str) -> list[str]:
    """The run's ``--set`` overrides."""
    sets = [f"seed={seed}", "exploration.mode=off", *args.set]  # plain GRPO: random seeds
    if mode == "control":
        sets.append("grpo.shuffle_advantages=true")
    return sets


def run_command(args: argparse.Namespace, seed: int, mode: str, out: Path) -> list[str]:
    cmd = ["spotlight", "train", "--recipe", args.recipe, "--runner", "local", "--out", str(out)]
    if args.iterations is not None:
        cmd += ["--iterations", str(args.iterations)]
    for s in run_sets(args, seed, mode):
        cmd += ["--set", s]
    return cmd


def run_config(args: argparse.Namespace, seed: int, mode: str) -> Config:
    """The config ``spotlight train`` runs for the run's command."""
    cfg = apply_overrides(get_recipe(args.recipe), run_sets(args, seed, mode))
    if args.iterations is not None:
        cfg = dataclasses.replace(cfg, num_iterations=args.iterations)
    return cfg


def one_run(args: argparse.Namespace, seed: int, mode: str, reuse: dict | None = None) -> dict:
    """The run's record: from its folder (run first where it has not finished), or from the
    record in ``reuse`` (an earlier report's, by run name) that ran the same config."""
    name = f"{mode}-{seed}"
    out = Path(args.runs) / name
    cmd = run_command(args, seed, mode, out)
    summary = out / "summary.json"
    if not summary.exists():
        record = reusable_record(reuse, name, run_config(args, seed, mode))
        if record is not None and "val_curve" in record:
            print(f"[learn] {name}: the report's record of the same config, reused", flush=True)
            return record
        exe = [str(Path(sys.executable).with_name("spotlight")), *cmd[1:]]
        if (out / "checkpoint" / "state.json").exists():
            exe = [exe[0], "train", "--resume", str(out), "--runner", "local"]
            if args.iterations is not None:
                exe += ["--iterations", str(args.iterations)]
            print(f"[learn] resuming {out}", flush=True)
        else:
            print(f"[learn] {shlex.join(cmd)}", flush=True)
        subprocess.run(exe, check=True)
    s = json.loads(summary.read_text())
    metrics = out / "metrics.jsonl"
    rows = (
        [json.loads(x) for x in metrics.read_text().splitlines() if x] if metrics.exists() else []
    )
    curve = [[0, s["initial_val_reward"]]]
    curve += [[m["iteration"] + 1, m["val_reward"]] for m in rows if "val_reward" in m]
    config = out / "config.json"
    return {
        "run": name,
        "seed": seed,
        "mode": mode,
        "initial_val_reward": s["initial_val_reward"],
        "final_val_reward": s["final_val_reward"],
        "gain": s["final_val_reward"] - s["initial_val_reward"],
        "wall_s": round(s["wall_s"], 1),
        "num_iterations": s["num_iterations"],
        "command": shlex.join(repo_relative(cmd)),  # paths inside the repository: relative
        "val_curve": curve,
        "config": repo_relative(json.loads(config.read_text())) if config.exists() else None,
    }


def plot(runs: list[dict], path: Path, title: str) -> None:
    """Validation reward against iteration, one line per run (control dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in runs:
        its, vals = [p[0] for p in r["val_curve"]], [p[1] for p in r["val_curve"]]
        style = "--" if r["mode"] == "control" else "-"
        ax.plot(its, vals, style, marker="o", label=f"{r['mode']} seed {r['seed']}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(args: argparse.Namespace, cfg: Config, runs: list[dict], path: Path) -> None:
    """The report and its plot, of the runs so far."""
    gains = [r["gain"] for r in runs if r["mode"] == "train"]
    doc = {
        "task": cfg.task or cfg.reward,
        "recipe": args.recipe,
        "overrides": args.set,
        "val_prompts": cfg.num_val_prompts,
        "val_seeds": cfg.num_val_seeds,
        "mean_train_gain": sum(gains) / len(gains) if gains else None,
        "min_train_gain": min(gains) if gains else None,
        "control_gain": [r["gain"] for r in runs if r["mode"] == "control"],
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "runs": runs,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    title = (
        f"{args.recipe}: validation on {cfg.num_val_prompts} prompts x {cfg.num_val_seeds} seeds"
    )
    plot(runs, path.with_suffix(".png"), title)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="tiny-ocr", choices=sorted(RECIPES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    ap.add_argument("--control-seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--iterations", type=int, default=None, help="(the recipe's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--runs", default=None, help="run folders (default runs/learn-<recipe>)")
    ap.add_argument("--out", default="docs/bench")
    ap.add_argument("--name", default=None, help="report name (default learn-<task>)")
    args = ap.parse_args()
    cfg: Config = apply_overrides(get_recipe(args.recipe), args.set)
    cfg.validate()
    args.runs = args.runs or f"runs/learn-{args.recipe}"
    path = Path(args.out) / f"{args.name or f'learn-{cfg.task or cfg.reward}'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    reuse = None
    if path.exists():
        reuse = {r["run"]: r for r in json.loads(path.read_text())["runs"] if "run" in r}
    runs: list[dict] = []
    for seed, mode in [(s, "train") for s in args.seeds] + [
        (s, "control") for s in args.control_seeds
    ]:
        runs.append(one_run(args, seed, mode, reuse))
        write_report(args, cfg, runs, path)  # after every run: a stopped bench keeps its runs
    for r in runs:
        print(
            f"[learn] {r['mode']:<7} seed {r['seed']}: {r['initial_val_reward']:.3f} -> "
            f"{r['final_val_reward']:.3f} ({r['gain']:+.3f}) in {r['wall_s'] / 60:.1f} min"
        )
    print(f"[learn] wrote {path}")


if __name__ == "__main__":
    main()
