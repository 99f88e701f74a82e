"""The reference loop as a run (``spotlight train --runner local``): its checkpoint, its resume,
and the run driver (:mod:`spotlight.training.driver`) around it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import torch
from safetensors.torch import load_file, save_file

from spotlight.config import Config
from spotlight.explore.exploration import Exploration
from spotlight.flow.old_policy import OldPolicy, load_old_policy
from spotlight.plots import plot_rewards
from spotlight.policies import make_policy
from spotlight.rewards import build_reward
from spotlight.training.driver import drive, open_run_folder
from spotlight.training.loop import ReferenceLoop
from spotlight.training.run_folder import (
    BANDIT_FILE,
    CKPT_DIR,
    atomic,
    preflight_run,
    read_checkpoint_state,
    read_old_policy,
    read_pending_rollout,
    sha256,
    write_json,
    write_old_policy,
    write_pending_rollout,
)


def run_local(
    cfg: Config,
    out_dir: Path,
    resume: bool = False,
    device: str = "cpu",
    log: TextIO | None = None,
) -> dict[str, Any]:
    """Run ``cfg.num_iterations`` iterations, writing ``out_dir``; returns the summary.

    ``out_dir`` gets ``config.json``, ``val_initial.json``, ``metrics.jsonl`` (one object per
    iteration), ``checkpoint/`` (after every iteration), ``summary.json`` and ``reward.png``
    (:func:`spotlight.training.driver.drive`, as the Ray job's). With ``resume`` the run
    continues after the last checkpointed iteration of ``out_dir``.
    """
    cfg.validate()
    if resume and cfg.rollout_staleness:
        raise ValueError(
            f"--resume {out_dir}: a run with rollout_staleness does not resume (the past"
            " weights it samples with are not checkpointed); start it again"
        )
    preflight_run(cfg, out_dir, resume)
    loop = ReferenceLoop(
        cfg, make_policy(cfg.policy, device), build_reward(cfg.reward, cfg.reward_model)
    )
    open_run_folder(cfg, out_dir, resume)
    start = _load_checkpoint(loop, out_dir, cfg) if resume else 0
    return drive(cfg, out_dir, _Local(loop, out_dir), start, loop.weights_version, log)


class _Local:
    """The reference loop as the run driver's backend (:class:`~spotlight.training.driver.
    Backend`)."""

    where = ""
    val_samples = ()

    def __init__(self, loop: ReferenceLoop, out_dir: Path):
        self.loop, self.out_dir = loop, out_dir

    def evaluate(self, it: int, version: int) -> float:
        return self.loop.evaluate()

    def iteration(self, it: int, version: int) -> dict[str, Any]:
        return self.loop.run_iteration(it)

    def figures(self) -> dict[str, Any]:
        return {}

    def save_checkpoint(self, done: int, version: int) -> None:
        _save_checkpoint(self.loop, self.out_dir, done, self.loop.cfg)

    def stopped(self, next_it: int) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        summary["runner"] = "local"
        plot_rewards(self.out_dir, title=f"{self.loop.cfg.recipe}: {self.out_dir.name}")


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
        "runner": "local",  # what `--resume` goes on with
    }
    if loop.explore.mode != "off":  # as the Ray job keeps them
        state["next_selection"] = loop.explore.state()
        state["planner"] = loop.explore.planner.to_dict()
        write_json(out_dir / BANDIT_FILE, {"planner": state["planner"]})
    if loop.old_policy is not None:
        write_old_policy(ckpt, loop.old_policy.to_bytes(), state)
    if loop.pending is not None:  # pipelined: the next rollout, sampled already
        p = loop.pending
        write_pending_rollout(ckpt, p.exploration.to_state(), p.weights.to_bytes(), state)
    write_json(ckpt / "state.json", state)


def _load_checkpoint(loop: ReferenceLoop, out_dir: Path, cfg: Config) -> int:
    state = read_checkpoint_state(out_dir, cfg.recipe)
    ckpt = out_dir / CKPT_DIR
    loop.policy.load_state_dict(load_file(str(ckpt / "policy.safetensors")))
    loop.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    load_old_policy(loop.old_policy, read_old_policy(out_dir, state), f"--resume {out_dir}")
    loop.weights_version = state["weights_version"]
    pending = read_pending_rollout(out_dir, state)
    if pending is not None and cfg.schedule == "pipelined":  # sampled on resume
        weights = OldPolicy(loop.policy)
        weights.load_bytes(pending[1])
        loop.resume_rollout = (Exploration.from_state(pending[0]), weights)
    loop.explore.load_state(state.get("next_selection"))
    if "planner" in state:  # as committed: the bandit file may be one update ahead
        loop.explore.planner.load(state["planner"])
    elif (out_dir / BANDIT_FILE).exists():  # a checkpoint from before state.json held it
        loop.explore.planner.load(json.loads((out_dir / BANDIT_FILE).read_text()).get("planner"))
    return state["iterations_done"]
