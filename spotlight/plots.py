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
