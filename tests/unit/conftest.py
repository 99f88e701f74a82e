"""Unit tests: no Ray, no sleeping (an injected clock for anything timed), tiny models."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from spotlight.policies.tiny import TinyConfig, TinyPolicy

# Smaller than the default tiny model: each forward takes about a millisecond.
SMALL = TinyConfig(
    height=16,
    width=32,
    patch=4,
    num_layers=2,
    num_heads=2,
    head_dim=16,
    text_dim=32,
    max_text_len=32,
)


@pytest.fixture(autouse=True)
def _no_ray_no_sleep(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError(
            "unit tests must not start Ray or sleep; use tests/ray or a fake clock"
        )

    monkeypatch.setattr("time.sleep", refuse)
    try:
        import ray
    except ImportError:  # pragma: no cover
        return
    monkeypatch.setattr(ray, "init", refuse)


REAL_SLEEP = time.sleep  # for the rare test that waits on a child process


@pytest.fixture
def small_policy() -> TinyPolicy:
    torch.manual_seed(1234)  # only to show construction ignores the global RNG
    return TinyPolicy(SMALL, seed=7)


def stop_local_run_at(cfg, out: Path, iteration: int, monkeypatch) -> dict:
    """``run_local`` of ``cfg`` into ``out``, stopped by an error as ``iteration`` starts (the
    machine went away); returns its checkpoint's ``state.json``."""
    from spotlight.training.loop import ReferenceLoop
    from spotlight.training.run_local import run_local

    original = ReferenceLoop.run_iteration

    def stop(self, it):
        if it == iteration:
            raise RuntimeError("the machine went away")
        return original(self, it)

    with monkeypatch.context() as m:
        m.setattr(ReferenceLoop, "run_iteration", stop)
        with pytest.raises(RuntimeError, match="went away"):
            run_local(cfg, out)
    return json.loads((out / "checkpoint" / "state.json").read_text())
