"""Unit tests: no Ray, no sleeping (an injected clock for anything timed), tiny models."""

from __future__ import annotations

import time

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
