"""Drive the reference loop as a run: output folder, metrics, checkpoints, resume, progress."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, TextIO

import torch
from safetensors.torch import load_file, save_file

from spotlight import progress
from spotlight.config import Config
from spotlight.loop import ReferenceLoop, stop_reason, validate_now
from spotlight.plots import plot_rewards
from spotlight.policies import make_policy
from spotlight.rewards import build_reward

CKPT_DIR = "checkpoint"
INITIAL_VAL = "val_initial.json"
"""Validation reward of the starting weights (iteration 0)."""


def run_local(
    cfg: Config,
    out_dir: Path,
    resume: bool = False,
    device: str = "cpu",
    log: TextIO | None = None,
) -> dict[str, Any]:
    """Run ``cfg.num_iterations`` iterations, writing ``out_dir``; returns the summary.

    ``out_dir`` gets ``config.json``, ``val_initial.json``, ``metrics.jsonl`` (one object per
    iteration), ``checkpoint/`` (after every iteration), ``summary.json`` and ``reward.png``.
    With ``resume`` the run continues after the last checkpointed iteration of ``out_dir``.
    """
    cfg.validate()
    if cfg.exploration.mode != "off":
        raise ValueError(
            f"exploration.mode={cfg.exploration.mode} needs the Ray runner (it explores on"
            " sampler replicas while the trainer trains); the reference loop samples random"
            " seeds: add --set exploration.mode=off, or use --runner ray"
        )
    preflight_run(cfg, out_dir, resume)
    loop = ReferenceLoop(cfg, make_policy(cfg.policy, device), build_reward(cfg.reward))
    out_dir.mkdir(parents=True, exist_ok=True)
    start = 0
    if resume:
        start = _load_checkpoint(loop, out_dir, cfg)
    else:
        if (out_dir / CKPT_DIR / "state.json").exists():
            raise ValueError(
                f"{out_dir} already holds a run; pass --resume {out_dir} to continue"
                " it or choose another --out"
            )
        _write_json(out_dir / "config.json", cfg.to_dict())
    metrics_path = out_dir / "metrics.jsonl"
    _truncate_metrics(metrics_path, start)
    metrics_path.touch()  # a run of 0 iterations (validation only) has an empty one
    t_start = time.perf_counter() - _last_wall_s(metrics_path)  # wall_s continues on resume
    if start == 0:
        val = loop.evaluate()
        _write_json(out_dir / INITIAL_VAL, {"val_reward": val})
        _print(
            log,
            f"[spotlight] {cfg.recipe}: {cfg.num_iterations} iterations, "
            f"validation reward before training {val:.4f}",
        )
    initial_val = initial_val_reward(out_dir)
    run_bar = progress.bar(
        log, cfg.recipe, cfg.num_iterations, initial=start, unit="iter", every_s=None, leave=True
    )
    for it in range(start, cfg.num_iterations):
        m = loop.run_iteration(it)
        if validate_now(cfg, it, time.perf_counter() - t_start):
            m["val_reward"] = loop.evaluate()
        m["wall_s"] = time.perf_counter() - t_start
        reason = stop_reason(cfg, m, initial_val)
        if reason is not None:
            m["stopped"] = reason
        with metrics_path.open("a") as f:
            f.write(json.dumps(m) + "\n")
        _save_checkpoint(loop, out_dir, it + 1, cfg)
        _print(log, _progress_line(m, cfg.num_iterations))
        run_bar.update(1)
        if reason is not None:
            _print(log, _stop_line(reason, m, initial_val, cfg))
            break
    run_bar.close()
    summary = _summarize(metrics_path, cfg)
    _write_json(out_dir / "summary.json", summary)
    plot_rewards(out_dir, title=f"{cfg.recipe}: {out_dir.name}")
    _print(
        log, f"[spotlight] done: {out_dir} (summary.json, metrics.jsonl, reward.png, {CKPT_DIR}/)"
    )
    return summary


def preflight_run(cfg: Config, out_dir: Path, resume: bool) -> None:
    """Cheap checks of a run's inputs, before any model is built or Ray starts: the run folder
    to resume (its checkpoint's recipe and checksum) and the tiny policy's starting checkpoint
    (a tiny-policy file whose images are the task's shape)."""
    if resume:
        read_checkpoint_state(out_dir, cfg.recipe)
    if cfg.policy.name == "tiny" and cfg.policy.checkpoint:
        from spotlight.policies.tiny import checkpoint_metadata
        from spotlight.tasks import check_checkpoint_task

        checkpoint_metadata(cfg.policy.checkpoint)
        if cfg.task is not None:
            check_checkpoint_task(cfg.policy.checkpoint, cfg.task)


def _progress_line(m: dict[str, Any], total: int) -> str:
    """One line per iteration (the Ray job's rows add queue depth and cost so far)."""
    val = f" val {m['val_reward']:.4f}" if "val_reward" in m else ""
    ray = f" queue {m['queue_depth']} cost ${m['cost_usd']:.4f}" if "cost_usd" in m else ""
    return (
        f"[iter {m['iteration'] + 1:>3}/{total}] reward {m['train_reward_mean']:.4f} "
        f"group-std {m['group_reward_std_mean']:.4f}{val} v{m['weights_version']}{ray} "
        f"sample {m['sample_s']:.1f}s train {m['train_s']:.1f}s"
    )


def _stop_line(reason: str, m: dict[str, Any], initial_val: float | None, cfg: Config) -> str:
    if reason == "target":
        return (
            f"[spotlight] target reached after iteration {m['iteration'] + 1}: validation "
            f"{m['val_reward']:.4f} >= {initial_val:.4f} + {cfg.stop_at_val_gain}"
        )
    return f"[spotlight] stopping after iteration {m['iteration'] + 1}: past max_wall_s"


def initial_val_reward(out_dir: Path) -> float | None:
    """The run's validation reward before training (``val_initial.json``), if written."""
    path = out_dir / INITIAL_VAL
    return json.loads(path.read_text())["val_reward"] if path.exists() else None


def _summarize(metrics_path: Path, cfg: Config) -> dict[str, Any]:
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
    vals = [r["val_reward"] for r in rows if "val_reward" in r]
    initial = metrics_path.parent / INITIAL_VAL
    return {
        "recipe": cfg.recipe,
        "num_iterations": len(rows),
        "initial_val_reward": (
            json.loads(initial.read_text())["val_reward"] if initial.exists() else None
        ),
        "final_val_reward": vals[-1] if vals else None,
        "train_reward_first": rows[0]["train_reward_mean"] if rows else None,
        "train_reward_last": rows[-1]["train_reward_mean"] if rows else None,
        "wall_s": rows[-1]["wall_s"] if rows else 0.0,
        "stopped": rows[-1].get("stopped", "iterations") if rows else "iterations",
    }


def _save_checkpoint(loop: ReferenceLoop, out_dir: Path, done: int, cfg: Config) -> None:
    """Write weights and optimizer, then state.json (with the weights' sha256) as the commit."""
    ckpt = out_dir / CKPT_DIR
    ckpt.mkdir(exist_ok=True)
    if hasattr(loop.policy, "save"):  # with architecture metadata: `spotlight eval` can load it
        _atomic(ckpt / "policy.safetensors", lambda p: loop.policy.save(p))
    else:
        state = {k: v.detach().contiguous().cpu() for k, v in loop.policy.state_dict().items()}
        _atomic(ckpt / "policy.safetensors", lambda p: save_file(state, str(p)))
    _atomic(ckpt / "optimizer.pt", lambda p: torch.save(loop.optimizer.state_dict(), p))
    _write_json(
        ckpt / "state.json",
        {
            "iterations_done": done,
            "weights_version": loop.weights_version,
            "recipe": cfg.recipe,
            "policy_sha256": _sha256(ckpt / "policy.safetensors"),
        },
    )


def read_checkpoint_state(out_dir: Path, recipe: str) -> dict[str, Any]:
    """``state.json`` of a run folder's checkpoint, after checking it is one of ``recipe``
    and that the weights match their checksum (both runners resume through this)."""
    ckpt = out_dir / CKPT_DIR
    if not (ckpt / "state.json").exists():
        raise ValueError(
            f"--resume {out_dir}: no {CKPT_DIR}/state.json there (not a run folder,"
            " or it stopped before its first iteration finished)"
        )
    state = json.loads((ckpt / "state.json").read_text())
    if state["recipe"] != recipe:
        raise ValueError(
            f"--resume {out_dir}: that run used recipe {state['recipe']!r}, not {recipe!r}"
        )
    if _sha256(ckpt / "policy.safetensors") != state["policy_sha256"]:
        raise ValueError(f"--resume {out_dir}: policy.safetensors does not match its checksum")
    return state


def _load_checkpoint(loop: ReferenceLoop, out_dir: Path, cfg: Config) -> int:
    state = read_checkpoint_state(out_dir, cfg.recipe)
    ckpt = out_dir / CKPT_DIR
    loop.policy.load_state_dict(load_file(str(ckpt / "policy.safetensors")))
    loop.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    loop.weights_version = state["weights_version"]
    return state["iterations_done"]


def _last_wall_s(path: Path) -> float:
    """``wall_s`` of the last row of a metrics file (0 when there is none)."""
    if not path.exists():
        return 0.0
    rows = [line for line in path.read_text().splitlines() if line]
    return float(json.loads(rows[-1])["wall_s"]) if rows else 0.0


def _truncate_metrics(path: Path, keep_below: int) -> None:
    """Drop metric rows of iterations >= keep_below (work redone after a resume)."""
    if not path.exists():
        return
    rows = [
        line
        for line in path.read_text().splitlines()
        if line and json.loads(line)["iteration"] < keep_below
    ]
    _atomic(path, lambda p: p.write_text("".join(r + "\n" for r in rows)))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_json(path: Path, obj: Any) -> None:
    _atomic(path, lambda p: p.write_text(json.dumps(obj, indent=1) + "\n"))


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _print(log: TextIO | None, line: str) -> None:
    progress.line(log, line)
