"""The exploration arms the benches compare, and the arm the exact-reward recipe runs. No Ray.

An arm is a set of :class:`spotlight.config.ExplorationConfig` fields. Each arm sets every field
the arms differ in, so an arm means the same whatever the defaults are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spotlight.config import ExplorationConfig

_ARM: dict[str, Any] = {"selection": "max_variance", "uniform": False, "planner_gain": "std"}
ARMS: dict[str, dict[str, Any]] = {
    "off": {"mode": "off"},
    "critical_path": {**_ARM, "mode": "critical_path"},
    "spot": {**_ARM, "mode": "spot"},
    "spot_uniform": {**_ARM, "mode": "spot", "uniform": True},
    "rescue": {**_ARM, "mode": "spot", "selection": "rescue"},
    "full_pool": {**_ARM, "mode": "critical_path", "pool_advantages": True},
    "spot_live": {**_ARM, "mode": "spot", "planner_gain": "live"},
}
"""Arms by name: ``off`` explores nothing; ``spot`` is the paper's (stale weights, the bandit
planner with the std gain, max-variance selection); ``spot_uniform`` spreads the same budget
evenly; ``rescue`` keeps the random seeds of a live group; ``spot_live`` plans by the
live-group gain; ``critical_path`` explores on the fresh weights; ``full_pool`` also normalizes
advantages over every explored seed."""

POWER_BENCH = "docs/bench/exploration-ocr-mini-exact-power.json"
"""The bench the exact-reward recipe's arm follows (OCR-mini, exact reward, 8 paired seeds)."""

EXACT_REWARD_ARM: str | None = None
"""The arm :func:`spotlight.bench_stats.chosen_arm` picks on :data:`POWER_BENCH` (a test holds
them equal): the best arm whose AUC difference to ``off`` has a 90% interval above zero on 8
paired seeds. None when no arm has shown that: ``tiny-ocr-exact`` then explores with the
standing defaults (the even split, ``spot_uniform``'s fields), to exercise the system rather
than to train faster."""


def with_arm(exploration: ExplorationConfig, arm: str) -> ExplorationConfig:
    """``exploration`` with the fields of ``arm`` set (the rest, such as the budget, kept)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
    return dataclasses.replace(exploration, **ARMS[arm])
