"""Pull dispatch on the real queue against static round robin, in simulated time."""

import pytest

from spotlight.scheduling.dispatch import pull_schedule, round_robin_schedule
from spotlight.scheduling.work_queue import WorkItem


def items(n, kind="rollout", start=0):
    return [WorkItem(f"{kind}-{i}", kind, 0, 0, ("p",), (i,)) for i in range(start, start + n)]


def test_equal_speeds_equal_makespans():
    its = items(4)
    cost = dict.fromkeys((i.item_id for i in its), 1.0)
    assert pull_schedule(its, cost, [1, 1]).makespan_s == 2.0
    assert round_robin_schedule(its, cost, [1, 1]).makespan_s == 2.0


def test_a_slow_replica_holds_back_round_robin_but_not_pull():
    its = items(5)
    cost = dict.fromkeys((i.item_id for i in its), 1.0)
    pull = pull_schedule(its, cost, [1.0, 0.25])
    rr = round_robin_schedule(its, cost, [1.0, 0.25])
    # pull: the slow one takes one item (done at 4); the fast one does the other four by 4
    assert pull.makespan_s == 4.0 and pull.worker_items == [4, 1]
    # round robin: the slow one gets items 1 and 3: 8 s
    assert rr.makespan_s == 8.0 and rr.worker_items == [3, 2]


def test_rollout_items_overtake_exploration_queued_before_them():
    explore = items(6, "explore")
    rollout = items(2, "rollout")
    cost = {i.item_id: 1.0 for i in explore + rollout}
    s = pull_schedule(explore[:2] + rollout + explore[2:], cost, [1.0, 1.0])
    assert s.makespan_of("rollout") == 1.0
    assert s.makespan_s == 4.0


def test_bad_inputs():
    its = items(1)
    with pytest.raises(ValueError, match="speed"):
        pull_schedule(its, {"rollout-0": 1.0}, [])
    with pytest.raises(ValueError, match="no cost"):
        round_robin_schedule(its, {}, [1.0])
