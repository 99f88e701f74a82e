"""The controller's exploration rate when the trainer samples part of the rollout."""

from __future__ import annotations

import pytest

from spotlight.scheduling.costs import ledger_pool
from spotlight.scheduling.work_queue import ItemResult, Pool
from spotlight.training.rollout import samplers_rate


def _result(pool: str, samples: int, busy_s: float) -> ItemResult:
    return ItemResult("i", "w", pool, [0.0] * samples, busy_s=busy_s)


def _rate(results, samples, sample_s, trainer_samples, pools):
    return samplers_rate(results, samples, sample_s, trainer_samples, pools)


def test_without_the_trainer_the_rate_is_the_rollouts():
    results = [_result(Pool.SPOT, 8, 2.0)] * 4
    assert _rate(results, 32, 4.0, False, {"spot": 2}) == pytest.approx(8.0)
    assert _rate([], 0, 4.0, False, {"spot": 2}) is None


def test_with_the_trainer_the_rate_is_the_replicas_own_times_their_number():
    # 2 replicas did 3 items of 8 in 2 s each; the trainer did 5 items: the rollout's own rate
    # (64 samples in 4 s = 16/s) would count the trainer's GPUs, which train during the update
    results = [_result(Pool.SPOT, 8, 2.0)] * 3 + [_result(Pool.TRAINER, 8, 1.0)] * 5
    pools = {"spot": 2, "trainer": 1}
    assert _rate(results, 64, 4.0, True, pools) == pytest.approx(24 / 6.0 * 2)
    only_trainer = [_result(Pool.TRAINER, 8, 1.0)] * 8
    assert _rate(only_trainer, 64, 4.0, True, pools) is None  # keep the last estimate


def test_the_trainers_busy_time_is_on_demand_time():
    assert ledger_pool(Pool.TRAINER) == Pool.ON_DEMAND
    assert ledger_pool(Pool.SPOT) == Pool.SPOT
