"""The pull queue's rules: priority, leases, exactly-once results, runs, worker liveness."""

import pytest

from spotlight.work_queue import ItemResult, WorkItem, WorkQueue


def item(i, kind="rollout"):
    return WorkItem(f"{kind}-{i}", kind, 0, 0, (f"p{i}",), (i,))


def result(item_id, worker="w"):
    return ItemResult(item_id, worker, "spot", [0.5])


def test_rollout_items_come_before_validation_and_exploration_then_fifo():
    q = WorkQueue()
    q.submit([item(0, "explore"), item(1, "val"), item(2, "rollout"), item(3, "rollout")])
    got = [it.item_id for it in q.pull("w", 10, now=0.0)]
    assert got == ["rollout-2", "rollout-3", "val-1", "explore-0"]


def test_pull_respects_max_items_and_kinds():
    q = WorkQueue()
    q.submit([item(i) for i in range(3)] + [item(9, "explore")])
    assert [it.item_id for it in q.pull("a", 2, 0.0)] == ["rollout-0", "rollout-1"]
    assert [it.item_id for it in q.pull("b", 5, 0.0, kinds=["explore"])] == ["explore-9"]
    assert [it.item_id for it in q.pull("b", 5, 0.0)] == ["rollout-2"]
    assert q.pull("c", 5, 0.0) == []


def test_expired_lease_returns_the_item_and_a_late_completion_is_dropped():
    q = WorkQueue(lease_s=10.0)
    q.submit([item(0)])
    (it,) = q.pull("slow", 1, now=0.0)
    assert q.pull("fast", 1, now=5.0) == []  # still leased
    (again,) = q.pull("fast", 1, now=10.5)  # lease ran out: re-offered
    assert again == it and q.leases_expired == 1
    assert q.complete(result(it.item_id, "fast"))
    assert not q.complete(result(it.item_id, "slow"))  # the slow one finishes late
    assert q.results([it.item_id])[it.item_id].worker_id == "fast"
    assert q.duplicates_ignored == 1


def test_heartbeat_keeps_a_lease():
    q = WorkQueue(lease_s=10.0)
    q.submit([item(0)])
    q.pull("w", 1, now=0.0)
    assert q.heartbeat("w", now=8.0) == 1
    assert q.pull("other", 1, now=15.0) == []
    assert q.expire(now=18.5) == 1


def test_resubmitting_known_ids_is_a_no_op_and_results_are_reused():
    q = WorkQueue()
    assert q.submit([item(0), item(1)]) == 2
    (a,) = q.pull("w", 1, 0.0)
    q.complete(result(a.item_id))
    assert q.submit([item(0), item(1), item(2)]) == 1  # 0 done, 1 pending, 2 new
    assert q.stats()["pending"] == 2


def test_release_returns_a_workers_items():
    q = WorkQueue()
    q.submit([item(0), item(1)])
    q.pull("w", 2, 0.0)
    assert q.release("w") == 2
    assert {it.item_id for it in q.pull("v", 5, 0.0)} == {"rollout-0", "rollout-1"}


def test_completion_of_an_unknown_item_is_ignored():
    q = WorkQueue()
    assert not q.complete(result("nope"))
    assert q.duplicates_ignored == 1


def test_open_run_keeps_the_same_run_and_clears_another():
    q = WorkQueue()
    assert not q.open_run("a")
    q.submit([item(0)])
    assert q.open_run("a")
    assert q.stats()["pending"] == 1
    assert not q.open_run("b")
    assert q.stats()["pending"] == 0 and q.run_id == "b"


def test_workers_counts_recent_pullers_by_pool():
    q = WorkQueue()
    q.pull("s1", 1, now=0.0, pool="spot")
    q.pull("s2", 1, now=9.0, pool="spot")
    q.pull("d1", 1, now=9.5, pool="on_demand")
    assert q.workers(now=10.0, within_s=5.0) == {"spot": 1, "on_demand": 1}
    q.release("s2")
    assert q.workers(now=10.0, within_s=5.0) == {"on_demand": 1}


def test_forget_and_cancel():
    q = WorkQueue()
    q.submit([item(0), item(1, "explore"), item(2)])
    assert q.cancel("explore") == 1
    (a,) = q.pull("w", 1, 0.0)
    q.complete(result(a.item_id))
    q.forget([a.item_id])
    assert q.results([a.item_id]) == {}
    assert q.cancel() == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "bogus"}, "unknown item kind"),
        ({"seeds": (1, 2)}, "same number"),
    ],
)
def test_bad_items_are_refused(kwargs, match):
    args = {
        "item_id": "x",
        "kind": "rollout",
        "iteration": 0,
        "weights_version": 0,
        "prompts": ("p",),
        "seeds": (1,),
    }
    with pytest.raises(ValueError, match=match):
        WorkItem(**{**args, **kwargs})
    with pytest.raises(ValueError, match="lease_s"):
        WorkQueue(lease_s=0)


def test_drop_withdraws_pending_leased_and_finished_items():
    q = WorkQueue()
    q.submit([item(0), item(1), item(2)])
    a, b = q.pull("w", 2, 0.0)
    q.complete(result(a.item_id))
    assert q.drop(["rollout-0", "rollout-1", "rollout-2"]) == 2  # 1 leased + 1 pending
    assert not q.complete(result(b.item_id))  # the late completion is ignored
    assert q.results(["rollout-0", "rollout-1"]) == {}
    assert q.stats()["pending"] == 0 and q.stats()["leased"] == 0
