"""Plots of a run folder's metrics.jsonl (PNG, matplotlib's non-interactive backend)."""

from __future__ import annotations

import json
from pathlib import Path


def plot_rewards(run_dir: Path, title: str | None = None) -> Path:
    """``run_dir/reward.png``: train reward and validation reward against iteration and time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    it = [r["iteration"] + 1 for r in rows]
    minutes = [r["wall_s"] / 60 for r in rows]
    train = [r["train_reward_mean"] for r in rows]
    val = [
        (r["iteration"] + 1, r["wall_s"] / 60, r["val_reward"]) for r in rows if "val_reward" in r
    ]
    initial = run_dir / "val_initial.json"
    if initial.exists():
        val.insert(0, (0, 0.0, json.loads(initial.read_text())["val_reward"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for ax, xs, col, label in ((axes[0], it, 0, "iteration"), (axes[1], minutes, 1, "minutes")):
        ax.plot(xs, train, color="0.7", lw=1, label="train reward (batch mean)")
        if val:
            ax.plot(
                [v[col] for v in val],
                [v[2] for v in val],
                "o-",
                color="C0",
                label="validation reward",
            )
        ax.set_xlabel(label)
        ax.set_ylabel("reward")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize=8)
    fig.suptitle(title or run_dir.name)
    out = run_dir / "reward.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_report(run_dir: Path, title: str | None = None) -> Path:
    """``run_dir/report.png``: reward, cost and per-pool GPU utilization against time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    minutes = [r["wall_s"] / 60 for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6), constrained_layout=True)
    axes[0].plot(minutes, [r["train_reward_mean"] for r in rows], color="0.6", label="train")
    val = [(r["wall_s"] / 60, r["val_reward"]) for r in rows if "val_reward" in r]
    if val:
        axes[0].plot(*zip(*val, strict=True), "o-", color="C0", label="validation")
    axes[0].set_ylabel("reward")
    axes[0].legend(fontsize=8)
    axes[1].plot(minutes, [r.get("cost_usd", 0.0) for r in rows], color="C2")
    axes[1].set_ylabel("cost so far (USD)")
    for pool, color in (("spot", "C1"), ("on_demand", "C3")):
        held = [r.get(f"gpu_s_{pool}", 0.0) for r in rows]
        busy = [r.get(f"busy_gpu_s_{pool}", 0.0) for r in rows]
        # Utilization within each iteration: busy / held over the iteration's interval.
        util = []
        for i in range(len(rows)):
            dh = held[i] - (held[i - 1] if i else 0.0)
            db = busy[i] - (busy[i - 1] if i else 0.0)
            util.append(min(1.0, db / dh) if dh > 0 else 0.0)
        axes[2].step(minutes, util, where="post", color=color, label=pool)
    preempt = [
        r["wall_s"] / 60
        for i, r in enumerate(rows)
        if i and r.get("preemptions", 0) > rows[i - 1].get("preemptions", 0)
    ]
    for x in preempt:
        axes[2].axvline(x, color="k", lw=0.8, ls=":")
    axes[2].set_ylim(0, 1.05)
    axes[2].set_ylabel("GPU utilization per iteration")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
    fig.suptitle(title or run_dir.name)
    out = run_dir / "report.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
