"""Drive the reference loop as a run: output folder, metrics, checkpoints, resume, progress."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

import torch
from safetensors.torch import load_file, save_file

from spotlight import progress
from spotlight.config import Config
from spotlight.flow.old_policy import load_old_policy
from spotlight.plots import plot_rewards
from spotlight.policies import make_policy
from spotlight.rewards import build_reward
from spotlight.training.loop import ReferenceLoop, stop_reason, validate_now
from spotlight.training.run_folder import (
    BANDIT_FILE,
    CKPT_DIR,
    INITIAL_VAL,
    METRICS,
    SUMMARY,
    append_row,
    atomic,
    initial_val_reward,
    last_wall_s,
    preflight_run,
    progress_line,
    read_checkpoint_state,
    read_old_policy,
    sha256,
    stop_line,
    summarize,
    truncate_metrics,
    write_json,
    write_old_policy,
)

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
    preflight_run(cfg, out_dir, resume)
    loop = ReferenceLoop(
        cfg, make_policy(cfg.policy, device), build_reward(cfg.reward, cfg.reward_model)
    )
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
        write_json(out_dir / "config.json", cfg.to_dict())
    metrics_path = out_dir / METRICS
    truncate_metrics(metrics_path, start)
    metrics_path.touch()  # a run of 0 iterations (validation only) has an empty one
    t_start = time.perf_counter() - last_wall_s(metrics_path)  # wall_s continues on resume
    if start == 0:
        val = loop.evaluate()
        write_json(out_dir / INITIAL_VAL, {"val_reward": val})
        progress.line(
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
        append_row(metrics_path, m)
        _save_checkpoint(loop, out_dir, it + 1, cfg)
        progress.line(log, progress_line(m, cfg.num_iterations))
        run_bar.update(1)
        if reason is not None:
            progress.line(log, stop_line(reason, m, initial_val, cfg))
            break
    run_bar.close()
    summary = summarize(metrics_path, cfg)
    write_json(out_dir / SUMMARY, summary)
    plot_rewards(out_dir, title=f"{cfg.recipe}: {out_dir.name}")
    progress.line(
        log, f"[spotlight] done: {out_dir} (summary.json, metrics.jsonl, reward.png, {CKPT_DIR}/)"
    )
    return summary


def _save_checkpoint(loop: ReferenceLoop, out_dir: Path, done: int, cfg: Config) -> None:
    """Write weights and optimizer (and the old policy, with ``grpo.nft_old_ema``), then
    state.json (with their sha256) as the commit."""
    ckpt = out_dir / CKPT_DIR
    ckpt.mkdir(exist_ok=True)
    if hasattr(loop.policy, "save"):  # with architecture metadata: `spotlight eval` can load it
        atomic(ckpt / "policy.safetensors", lambda p: loop.policy.save(p))
    else:
        state = {k: v.detach().contiguous().cpu() for k, v in loop.policy.state_dict().items()}
        atomic(ckpt / "policy.safetensors", lambda p: save_file(state, str(p)))
    atomic(ckpt / "optimizer.pt", lambda p: torch.save(loop.optimizer.state_dict(), p))
    state = {
        "iterations_done": done,
        "weights_version": loop.weights_version,
        "recipe": cfg.recipe,
        "policy_sha256": sha256(ckpt / "policy.safetensors"),
    }
    if loop.explore.mode != "off":  # as the Ray job keeps them
        state["next_selection"] = loop.explore.state()
        write_json(out_dir / BANDIT_FILE, {"planner": loop.explore.planner.to_dict()})
    if loop.old_policy is not None:
        write_old_policy(ckpt, loop.old_policy.to_bytes(), state)
    write_json(ckpt / "state.json", state)


def _load_checkpoint(loop: ReferenceLoop, out_dir: Path, cfg: Config) -> int:
    state = read_checkpoint_state(out_dir, cfg.recipe)
    ckpt = out_dir / CKPT_DIR
    loop.policy.load_state_dict(load_file(str(ckpt / "policy.safetensors")))
    loop.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    load_old_policy(loop.old_policy, read_old_policy(out_dir, state), f"--resume {out_dir}")
    loop.weights_version = state["weights_version"]
    loop.explore.load_state(state.get("next_selection"))
    if (out_dir / BANDIT_FILE).exists():
        loop.explore.planner.load(json.loads((out_dir / BANDIT_FILE).read_text()).get("planner"))
    return state["iterations_done"]
