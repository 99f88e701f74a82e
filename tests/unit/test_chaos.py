"""The chaos bench's pure parts: the seeded fault schedule and the invariant checker."""

from __future__ import annotations

import pytest
import torch

from spotlight.scheduling.chaos import (
    MOMENTS,
    FaultKind,
    Moment,
    count_by_kind,
    draw_schedule,
)
from spotlight.training.chaos_check import (
    accounting,
    is_timing_key,
    row_differences,
    tensor_differences,
)

ALL = tuple(FaultKind)


def test_a_schedule_gives_every_kind_its_minimum_at_distinct_iterations():
    faults = draw_schedule(7, 48, ALL, min_each=2, num_faults=22)
    assert len(faults) == 22
    assert all(n >= 2 for n in count_by_kind(faults).values())
    assert set(count_by_kind(faults)) == {str(k) for k in ALL}
    its = [f.iteration for f in faults]
    assert its == sorted(its) and len(set(its)) == len(its)
    assert min(its) >= 1 and max(its) <= 46  # the first and the last iteration stay clean
    assert all(f.moment in MOMENTS[f.kind] for f in faults)
    assert all(0.0 <= f.delay_s <= 1.0 for f in faults)


def test_the_same_seed_draws_the_same_schedule_and_another_seed_another():
    a = draw_schedule(3, 40, ALL, 2, 20)
    assert a == draw_schedule(3, 40, ALL, 2, 20)
    assert a != draw_schedule(4, 40, ALL, 2, 20)
    moments = {f.moment for seed in range(3) for f in draw_schedule(seed, 40, ALL, 2, 20)}
    assert moments == set(Moment)  # mid-commit and mid-broadcast among them


def test_a_kind_stays_within_its_maximum():
    cap = {FaultKind.TRAINER: 2, FaultKind.DRIVER: 2}
    for seed in range(20):
        counts = count_by_kind(draw_schedule(seed, 40, ALL, 2, 30, max_each=cap))
        assert counts["trainer"] == counts["driver"] == 2
    with pytest.raises(ValueError, match="exceed the kinds' maximum"):
        draw_schedule(0, 40, (FaultKind.TRAINER,), 1, 3, max_each=cap)


def test_a_schedule_that_cannot_fit_is_refused():
    with pytest.raises(ValueError, match="cannot give each of 8 kinds 2"):
        draw_schedule(0, 40, ALL, 2, 15)
    with pytest.raises(ValueError, match="the run has 8"):
        draw_schedule(0, 10, ALL, 1, 9)


def test_a_fault_serializes_with_its_names():
    (f,) = draw_schedule(0, 4, (FaultKind.QUEUE,), 1, 1)
    assert f.to_dict()["kind"] == "queue" and f.to_dict()["moment"] in MOMENTS[FaultKind.QUEUE]


def _rows():
    return [
        {"iteration": i, "weights_version": i + 1, "train_reward_mean": 0.1 * i, "num_samples": 8}
        for i in range(3)
    ]


def test_rows_equal_but_for_timing_keys_and_fault_counters():
    want = [{**r, "sample_s": 1.0, "wall_s": 2.0} for r in _rows()]
    got = [
        {**r, "sample_s": 9.0, "wall_s": 3.0, "queue_restarts": 2, "cost_usd": 1.0} for r in _rows()
    ]
    assert row_differences(got, want) == []
    assert is_timing_key("weights_load_s_max") and is_timing_key("items_lost")
    assert not is_timing_key("train_reward_mean") and not is_timing_key("seeds_explored")


def test_a_value_one_bit_off_a_missing_key_or_a_lost_row_is_named():
    want = _rows()
    got = [dict(r) for r in want]
    got[1]["train_reward_mean"] = float.fromhex(want[1]["train_reward_mean"].hex()[:-1] + "1")
    del got[2]["num_samples"]
    assert row_differences(got, want) == [
        f"iteration 1: train_reward_mean {got[1]['train_reward_mean']!r} != 0.1",
        "iteration 2: 'num_samples' missing",
    ]
    assert row_differences(got[:2], want) == ["iterations [0, 1] != [0, 1, 2]"]


def test_tensors_must_be_bit_equal():
    a = {"w": torch.ones(3), "b": torch.zeros(2)}
    assert tensor_differences({k: v.clone() for k, v in a.items()}, a) == []
    off = {"w": torch.ones(3), "b": torch.tensor([0.0, 1e-30]), "x": torch.ones(1)}
    assert tensor_differences(off, a) == ["x: not expected", "b: differs"]
    assert tensor_differences({"w": torch.ones(3, dtype=torch.float64)}, a) == [
        "b: missing",
        "w: differs",
    ]


def test_accounting_finds_an_iteration_trained_twice_or_missing():
    rows = _rows()
    assert accounting(rows, 3).items_trained_twice == 0
    assert accounting(rows, 3).iterations_missing == []
    twice = [*rows[:2], {**rows[1]}, {**rows[2], "weights_version": 4}]
    acc = accounting(twice, 3)
    assert acc.items_trained_twice == 16  # the repeated row, and the update applied twice
    assert accounting(rows[:2], 3).iterations_missing == [2]
    assert accounting([{**rows[0], "items_lost": 3}], 1).items_lost == 3
