"""The pull queue's rules: priority, leases, exactly-once results, runs, worker liveness."""

import pytest

from spotlight.scheduling.work_queue import ItemResult, ItemState, WorkItem, WorkQueue


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


# -- Checkpoints, returned items' place, spill to on-demand ---------------------------------------
from spotlight.scheduling.work_queue import ItemCheckpoint, SpillPolicy  # noqa: E402


def ck(step, n=1):
    return ItemCheckpoint(step, tuple(f"state{step}-{i}".encode() for i in range(n)))


def test_an_interrupted_item_resumes_from_its_last_commit_after_a_lease_expiry():
    q = WorkQueue(lease_s=10.0)
    q.submit([item(0)])
    (it,) = q.pull("a", 1, now=0.0)
    assert it.resume is None
    assert q.commit(it.item_id, "a", ck(3), now=4.0)
    assert q.commit(it.item_id, "a", ck(6), now=8.0)  # a commit extends the lease ...
    assert q.pull("b", 1, now=15.0) == []  # ... so it has not expired at 15
    (again,) = q.pull("b", 1, now=18.5)  # node died after step 6: expired at 18
    assert again.resume.step == 6 and again.resume.worker_id == "a"
    assert again.resume.trajectories == (b"state6-0",)
    assert q.stats()["items_resumed"] == 1 and q.stats()["steps_resumed"] == 6
    # the dead worker's late commit is refused; the new holder cannot go back in steps
    assert not q.commit(it.item_id, "a", ck(9), now=19.0)
    assert not q.commit(it.item_id, "b", ck(2), now=19.0)
    assert q.commit(it.item_id, "b", ck(8), now=19.0)
    assert q.complete(result(it.item_id, "b"))
    assert q.stats()["checkpoints_held"] == 0  # the finished item's checkpoint is dropped
    assert q.stats()["checkpoints_refused"] == 2


def test_release_with_checkpoints_commits_then_returns_the_items():
    q = WorkQueue()
    q.submit([item(0), item(1)])
    a, b = q.pull("w", 2, now=0.0)
    assert q.release("w", {a.item_id: ck(4)}, now=1.0) == 2
    got = {it.item_id: it for it in q.pull("x", 2, now=2.0)}
    assert got[a.item_id].resume.step == 4 and got[b.item_id].resume is None
    assert q.stats()["released"] == 2


def test_a_checkpoint_must_cover_every_sample():
    q = WorkQueue()
    q.submit([WorkItem("r", "rollout", 0, 0, ("p", "p"), (1, 2))])
    q.pull("w", 1, 0.0)
    with pytest.raises(ValueError, match="2 samples"):
        q.commit("r", "w", ck(1, n=1), 0.0)


def test_returned_items_keep_their_place_among_their_kind():
    q = WorkQueue()
    q.submit([item(0), item(1)])
    q.pull("w", 1, now=0.0)
    q.submit([item(2)])
    q.release("w", now=1.0)
    assert [it.item_id for it in q.pull("x", 3, now=2.0)] == ["rollout-0", "rollout-1", "rollout-2"]


@pytest.mark.parametrize(
    "mode, at, expected",
    [
        ("never", 100.0, []),
        ("always", 0.0, ["rollout-0", "val-1"]),
        ("after_wait", 29.0, []),
        ("after_wait", 30.0, ["rollout-0", "val-1"]),
    ],
)
def test_on_demand_replicas_take_only_what_the_spill_policy_allows(mode, at, expected):
    q = WorkQueue(spill=SpillPolicy(mode, wait_s=30.0))
    q.submit([item(0), item(1, "val"), item(2, "explore")], now=0.0)
    got = [it.item_id for it in q.pull("od", 5, now=at, pool="on_demand")]
    assert got == expected
    # spot replicas take everything, exploration included
    assert "explore-2" in [it.item_id for it in q.pull("spot", 5, now=at, pool="spot")]


def test_spill_wait_counts_from_the_return_to_the_queue_while_spot_is_alive():
    q = WorkQueue(lease_s=10.0, spill=SpillPolicy("after_wait", wait_s=5.0))
    q.submit([item(0)], now=0.0)
    q.pull("spot", 1, now=0.0)
    q.heartbeat("spot", now=19.0)
    q.release("spot", now=20.0)  # the item comes back at 20 (its replica stopped)
    q.pull("spot2", 0, now=21.0)  # another spot replica is alive (pulls nothing)
    assert q.pull("od", 1, now=24.0, pool="on_demand") == []
    assert [it.item_id for it in q.pull("od", 1, now=25.0, pool="on_demand")] == ["rollout-0"]


def test_spill_starts_at_once_when_spot_capacity_has_been_gone_for_the_wait():
    q = WorkQueue(spill=SpillPolicy("after_wait", wait_s=5.0))
    q.submit([item(0)], now=0.0)
    q.pull("spot", 0, now=1.0)  # the last spot replica seen, at 1
    q.submit([item(1)], now=10.0)  # no spot replica since 1: no reason to wait for one
    got = [it.item_id for it in q.pull("od", 2, now=10.0, pool="on_demand")]
    assert got == ["rollout-0", "rollout-1"]
    fresh = WorkQueue(spill=SpillPolicy("after_wait", wait_s=5.0))
    fresh.submit([item(2)], now=100.0)  # never any spot replica: counts from the first submit
    assert fresh.pull("od", 1, now=104.0, pool="on_demand") == []
    assert len(fresh.pull("od", 1, now=105.0, pool="on_demand")) == 1


def test_bad_spill_policy():
    with pytest.raises(ValueError, match="unknown spill mode"):
        SpillPolicy("sometimes")


def test_notices_count_each_worker_once():
    q = WorkQueue()
    q.submit([item(0)])
    q.pull("w", 1, 0.0)
    q.release("w", notice=True)
    q.release("w", notice=True)
    q.release("v")
    assert q.stats()["notices"] == 1


def test_trainer_workers_take_rollout_items_at_once_and_are_not_spot_capacity():
    from spotlight.scheduling.work_queue import Kind, Pool

    q = WorkQueue(spill=SpillPolicy("after_wait", wait_s=30.0))
    q.submit([item(0), item(1), item(2, "explore")], now=0.0)
    q.pull("spot", 0, now=0.0)  # a spot replica is alive: on-demand ones must wait
    assert q.pull("od", 1, now=1.0, pool=Pool.ON_DEMAND) == []
    got = q.pull("trainer-0", 5, now=1.0, kinds=[Kind.ROLLOUT], pool=Pool.TRAINER)
    assert [it.item_id for it in got] == ["rollout-0", "rollout-1"]  # at once, rollout only
    assert q.workers(now=1.0, within_s=5.0) == {"spot": 1, "on_demand": 1, "trainer": 1}
    # a trainer's pulls are no sign of spot capacity: the spill clock still runs from t=0
    q.submit([item(3)], now=40.0)
    q.pull("trainer-0", 0, now=40.0, kinds=[Kind.ROLLOUT], pool=Pool.TRAINER)
    assert len(q.pull("od", 1, now=40.0, pool=Pool.ON_DEMAND)) == 1


def test_an_item_moves_through_explicit_states():
    q = WorkQueue(lease_s=10.0)
    q.submit([item(0), item(1), item(2)])
    assert q.state("rollout-0") == ItemState.PENDING and q.state("nope") is None
    q.pull("w", 1, now=0.0)
    assert q.state("rollout-0") == ItemState.LEASED
    q.expire(now=11.0)  # the lease ran out: back in line
    assert q.state("rollout-0") == ItemState.PENDING
    q.pull("w", 1, now=11.0)
    assert q.complete(result("rollout-0"))
    assert q.state("rollout-0") == ItemState.DONE and q.results(["rollout-0"])
    q.forget(["rollout-0"])
    assert q.state("rollout-0") is None and q.submit([item(0)]) == 1  # forgotten: new again
    (pulled,) = q.pull("v", 1, now=12.0)  # resubmitted last, rollout-0 is now behind 1 and 2
    assert pulled.item_id == "rollout-1" and q.state("rollout-1") == ItemState.LEASED
    assert q.release("v", now=13.0) == 1 and q.state("rollout-1") == ItemState.PENDING
    assert q.cancel() == 3  # the three pending items
    assert {q.state(f"rollout-{i}") for i in range(3)} == {None}
    q.submit([item(5)])
    q.pull("w", 1, now=14.0)
    assert q.drop(["rollout-5"]) == 1 and q.state("rollout-5") is None
    assert not q.complete(result("rollout-5"))  # a late completion of a dropped item
