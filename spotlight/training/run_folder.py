"""The run folder both runners write: its layout, and reading and writing it safely.

```
<out>/config.json        the run's Config
      val_initial.json   the validation reward before training
      metrics.jsonl      one row per iteration (append-only; a resume drops rows it redoes)
      checkpoint/        policy.safetensors, optimizer.pt, ..., state.json (written last: the
                         commit, with the weights' sha256); with grpo.nft_old_ema also
                         nft_old_policy.safetensors (the EMA sampling policy, its sha256 in
                         state.json too)
      summary.json       written at the end
```

Every file but ``metrics.jsonl`` is replaced atomically (:func:`atomic`): a run killed at any
moment leaves the previous version or the new one, never half of one. No torch, no Ray.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from spotlight.config import Config

CKPT_DIR = "checkpoint"
INITIAL_VAL = "val_initial.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
OLD_POLICY_FILE = "nft_old_policy.safetensors"
"""In ``checkpoint/`` with ``grpo.nft_old_ema``: DiffusionNFT's EMA sampling policy
(``spotlight.flow.old_policy.OldPolicy.to_bytes``); ``policy.safetensors`` holds the trained
weights."""
ROLLOUT_WEIGHTS_FILE = "rollout_weights.safetensors"
"""In ``checkpoint/`` of a pipelined run (``schedule="pipelined"``) with an iteration left: the
weights the next iteration's rollout is sampled with, one version before the checkpoint's
(``OldPolicy.to_bytes``: the trainable parameters); ``state.json``'s ``pending_rollout`` holds
that rollout's plan."""
BANDIT_FILE = "bandit_state.json"
"""The exploration planner's statistics (``{"planner": ...}``), beside the checkpoint: the Ray
job's bandit-state actor persists them there, the local runner writes them itself."""


def preflight_run(cfg: Config, out_dir: Path, resume: bool) -> None:
    """Cheap checks of a run's inputs, before any model is built or Ray starts: the run folder
    to resume (its checkpoint's recipe and checksum), the prompt file, and the tiny policy's
    starting checkpoint (a tiny-policy file whose images are the task's shape)."""
    if resume:
        read_checkpoint_state(out_dir, cfg.recipe)
    if cfg.prompt_file is not None:
        from spotlight.prompts import read_prompt_file

        read_prompt_file(cfg.prompt_file)
    if cfg.policy.name == "tiny" and cfg.policy.checkpoint:
        from spotlight.policies.tiny import check_checkpoint_tensors

        check_checkpoint_tensors(cfg.policy.checkpoint)  # a tiny-policy file, whole
        if cfg.task is not None:
            check_checkpoint_task(cfg.policy.checkpoint, cfg.task)


def check_checkpoint_task(checkpoint: str | Path, name: str) -> None:
    """Refuse a tiny-policy checkpoint that draws other images than task ``name`` scores
    (read from the file's header, before any model is built).

    Raises:
        ValueError: the file is not a tiny-policy checkpoint, or its images are another
            shape than the task's (naming the task whose shape it has).
    """
    from spotlight.policies.tiny import checkpoint_config
    from spotlight.tasks import TASK_NAMES, base_checkpoint

    def shape(path) -> tuple[int, int, int]:
        c = checkpoint_config(path)
        return (c.height, c.width, c.channels)

    have, want = shape(checkpoint), shape(base_checkpoint(name))
    if have != want:
        other = [t for t in TASK_NAMES if t != name and shape(base_checkpoint(t)) == have]
        what = f"an {other[0]} model" if other else "no task's model"
        raise ValueError(
            f"{checkpoint} draws {have[0]}x{have[1]}x{have[2]} images ({what}); task {name}"
            f" scores {want[0]}x{want[1]}x{want[2]}"
        )


QUEUE_COUNTERS = (
    "preemptions",
    "preemption_notices",
    "items_resumed",
    "steps_resumed",
    "items_released",
    "leases_expired",
    "duplicates_ignored",
)
"""Run counters kept by the queue actor (or the injector): carried over by a resumed driver."""

FAULT_COUNTERS = (*QUEUE_COUNTERS, "items_lost", "queue_restarts", "items_reused", "spot_nodes")
"""Every fault counter of a Ray run's metrics row (docs/design.md, "Preemptions")."""


def progress_line(m: dict[str, Any], total: int) -> str:
    """One line per iteration (the Ray job's rows add queue depth and cost so far)."""
    val = f" val {m['val_reward']:.4f}" if "val_reward" in m else ""
    ray = f" queue {m['queue_depth']} cost ${m['cost_usd']:.4f}" if "cost_usd" in m else ""
    return (
        f"[iter {m['iteration'] + 1:>3}/{total}] reward {m['train_reward_mean']:.4f} "
        f"group-std {m['group_reward_std_mean']:.4f}{val} v{m['weights_version']}{ray} "
        f"sample {m['sample_s']:.1f}s train {m['train_s']:.1f}s"
    )


STATUS_EVERY = 10
"""Iterations between :func:`status_line` lines where no progress bar shows the run."""


def status_line(rows: list[dict[str, Any]], total: int) -> str:
    """Where a run stands, from its metrics rows so far: iterations, elapsed time and ETA (at
    the mean pace so far), preemptions and items lost, seeds explored. Printed every
    :data:`STATUS_EVERY` iterations where there is no terminal (``ray job submit``'s log)."""
    last = rows[-1]
    done = last["iteration"] + 1
    elapsed = last["wall_s"]
    eta = elapsed / done * (total - done)
    explored = sum(r.get("seeds_explored", 0) for r in rows)
    return (
        f"[spotlight] {done}/{total} iterations, {_clock(elapsed)} elapsed, ETA {_clock(eta)};"
        f" preemptions {last.get('preemptions', 0)}, items lost {last.get('items_lost', 0)};"
        f" seeds explored {explored}"
    )


def _clock(seconds: float) -> str:
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s % 60:02d}s"


def stop_line(reason: str, m: dict[str, Any], initial_val: float | None, cfg: Config) -> str:
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


def read_rows(metrics_path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, in order."""
    return [json.loads(line) for line in metrics_path.read_text().splitlines() if line]


def summarize(metrics_path: Path, cfg: Config) -> dict[str, Any]:
    rows = read_rows(metrics_path)
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


def checkpoint_runner(out_dir: Path) -> str | None:
    """The runner that wrote the run folder's checkpoint (``ray`` or ``local``): its
    ``state.json``'s ``runner``; in a state written before that was recorded, ``ray`` where it
    holds the Ray job's ledger, else ``local``. None without a readable checkpoint."""
    try:
        state = json.loads((out_dir / CKPT_DIR / "state.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    return state.get("runner") or ("ray" if "ledger" in state else "local")


def read_checkpoint_state(out_dir: Path, recipe: str) -> dict[str, Any]:
    """``state.json`` of a run folder's checkpoint, after checking it is one of ``recipe``
    and that the weights match their checksum (both runners resume through this)."""
    ckpt = out_dir / CKPT_DIR
    if not (ckpt / "state.json").exists():
        raise ValueError(
            f"--resume {out_dir}: no {CKPT_DIR}/state.json there (not a run folder,"
            " or it stopped before its first iteration finished)"
        )
    try:
        state = json.loads((ckpt / "state.json").read_text())
        keys = ("iterations_done", "weights_version", "recipe", "policy_sha256")
        missing = [k for k in keys if k not in state] if isinstance(state, dict) else keys
    except ValueError as e:  # not JSON, or not text
        raise ValueError(f"--resume {out_dir}: {CKPT_DIR}/state.json is not JSON ({e})") from None
    if missing:
        raise ValueError(f"--resume {out_dir}: {CKPT_DIR}/state.json lacks {', '.join(missing)}")
    if not (ckpt / "policy.safetensors").is_file():
        raise ValueError(f"--resume {out_dir}: {CKPT_DIR}/policy.safetensors is missing")
    if state["recipe"] != recipe:
        raise ValueError(
            f"--resume {out_dir}: that run used recipe {state['recipe']!r}, not {recipe!r}"
        )
    if sha256(ckpt / "policy.safetensors") != state["policy_sha256"]:
        raise ValueError(f"--resume {out_dir}: policy.safetensors does not match its checksum")
    if "old_policy_sha256" in state and (
        not (ckpt / OLD_POLICY_FILE).exists()
        or sha256(ckpt / OLD_POLICY_FILE) != state["old_policy_sha256"]
    ):
        raise ValueError(f"--resume {out_dir}: {OLD_POLICY_FILE} does not match its checksum")
    if "rollout_weights_sha256" in state and (
        not (ckpt / ROLLOUT_WEIGHTS_FILE).exists()
        or sha256(ckpt / ROLLOUT_WEIGHTS_FILE) != state["rollout_weights_sha256"]
    ):
        raise ValueError(f"--resume {out_dir}: {ROLLOUT_WEIGHTS_FILE} does not match its checksum")
    return state


def write_old_policy(ckpt: Path, data: bytes, state: dict[str, Any]) -> None:
    """Write the old-policy bytes into the checkpoint folder ``ckpt`` (atomically) and their
    sha256 into ``state``, the ``state.json`` written after it (``grpo.nft_old_ema``)."""
    atomic(ckpt / OLD_POLICY_FILE, lambda p: p.write_bytes(data))
    state["old_policy_sha256"] = sha256(ckpt / OLD_POLICY_FILE)


def write_pending_rollout(
    ckpt: Path, pending: dict[str, Any], weights: bytes, state: dict[str, Any]
) -> None:
    """A pipelined run's next rollout in the checkpoint folder ``ckpt``: the weights that
    sample it (atomically, their sha256 into ``state``) and its plan (``state``'s
    ``pending_rollout``), ``state`` being the ``state.json`` written after it."""
    atomic(ckpt / ROLLOUT_WEIGHTS_FILE, lambda p: p.write_bytes(weights))
    state["rollout_weights_sha256"] = sha256(ckpt / ROLLOUT_WEIGHTS_FILE)
    state["pending_rollout"] = pending


def read_pending_rollout(out_dir: Path, state: dict[str, Any]) -> tuple[dict, bytes] | None:
    """The checkpoint's pending rollout (its plan and its weights' bytes, checked by
    :func:`read_checkpoint_state`), or None (a sync run, or no iteration left)."""
    if "pending_rollout" not in state:
        return None
    return state["pending_rollout"], (out_dir / CKPT_DIR / ROLLOUT_WEIGHTS_FILE).read_bytes()


def read_old_policy(out_dir: Path, state: dict[str, Any]) -> bytes | None:
    """The checkpoint's old-policy bytes (checked by :func:`read_checkpoint_state`), or None
    when the run has none (``grpo.nft_old_ema`` off)."""
    if "old_policy_sha256" not in state:
        return None
    return (out_dir / CKPT_DIR / OLD_POLICY_FILE).read_bytes()


def last_wall_s(path: Path) -> float:
    """``wall_s`` of the last row of a metrics file (0 when there is none)."""
    if not path.exists():
        return 0.0
    rows = [line for line in path.read_text().splitlines() if line]
    return float(json.loads(rows[-1])["wall_s"]) if rows else 0.0


def truncate_metrics(path: Path, keep_below: int) -> None:
    """Drop metric rows of iterations >= keep_below (work redone after a resume)."""
    if not path.exists():
        return
    rows = [
        line
        for line in path.read_text().splitlines()
        if line and json.loads(line)["iteration"] < keep_below
    ]
    atomic(path, lambda p: p.write_text("".join(r + "\n" for r in rows)))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json(path: Path, obj: Any) -> None:
    atomic(path, lambda p: p.write_text(json.dumps(obj, indent=1) + "\n"))


def atomic(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one iteration's row to ``metrics.jsonl``."""
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
