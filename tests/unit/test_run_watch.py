"""The driver's waits (job/run_watch.py): GPU time held per slice, the trainer watched, the
trace clock advanced; and the held-GPU rule (scheduling/costs.py). No Ray, milliseconds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spotlight.job import run_watch
from spotlight.job.options import RayOptions
from spotlight.job.run_watch import CapacityWatch, ClusterLost, RunWatch
from spotlight.scheduling.capacity import NodeType, job_roles
from spotlight.scheduling.costs import Ledger, PriceTable, held_gpus
from spotlight.scheduling.work_queue import ItemResult, Pool


def test_held_gpus_counts_the_trainers_gpus_once():
    pools = {"spot": 3, "on_demand": 1, "trainer": 2}
    assert held_gpus(pools, 2) == [("spot", 3), ("on_demand", 1), ("on_demand", 2)]
    assert held_gpus(pools, 0) == [("spot", 3), ("on_demand", 1)]
    assert held_gpus({}, 4) == [("on_demand", 4)]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Trainer:
    def __init__(self):
        self.running, self.checks = True, 0

    def alive(self):
        return self.running

    def check(self):
        self.checks += 1
        if not self.running:
            raise RuntimeError("the trainer died")


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(run_watch.time, "monotonic", c)
    return c


def _watch(clock, stats, injector=None):
    opts = RayOptions(num_train_workers=2)
    return RunWatch(lambda: stats, Ledger(PriceTable()), opts, None, injector, since=clock.now)


def test_each_slice_holds_the_replicas_and_the_trainer_since_the_last(clock):
    stats = {"workers_by_pool": {"spot": 3, "trainer": 2}, "pending": 0}
    watch = _watch(clock, stats)
    watch.trainer = Trainer()
    clock.now += 10.0
    watch.tick()
    assert watch.ledger.held_s[Pool.SPOT] == 30.0
    assert watch.ledger.held_s[Pool.ON_DEMAND] == 20.0  # the trainer's 2 workers, once
    assert watch.stats is stats
    watch.trainer.running = False  # stopped: no longer held, and the next check fails
    clock.now += 5.0
    with pytest.raises(RuntimeError, match="died"):
        watch.tick()
    assert watch.ledger.held_s[Pool.SPOT] == 45.0
    assert watch.ledger.held_s[Pool.ON_DEMAND] == 20.0


def test_a_wait_ticks_after_every_slice_and_times_out(clock):
    stats = {"workers_by_pool": {"spot": 1}, "pending": 0}
    events = []
    injector = SimpleNamespace(tick=lambda t: events.append(t) or [])
    watch = _watch(clock, stats, injector)
    answers = iter([None, None, "done"])
    slices = []

    def poll(wait_s):
        slices.append(wait_s)
        clock.now += wait_s
        return next(answers)

    assert watch.wait("x", poll, timeout_s=60.0) == "done"
    assert slices == [run_watch.WAIT_SLICE_S] * 3
    assert len(events) == 3  # the trace clock advanced after each slice
    assert watch.ledger.held_s[Pool.SPOT] == 3 * run_watch.WAIT_SLICE_S

    def nothing(wait_s):
        clock.now += wait_s

    with pytest.raises(TimeoutError, match="x: nothing after 2 s"):
        watch.wait("x", nothing, 2.0)
    assert len(events) == 6  # 3 slices: after the second, the deadline was not yet past


def test_busy_time_goes_to_the_pool_that_did_the_work(clock):
    watch = _watch(clock, {})
    watch.bill(
        [
            ItemResult("a", "w", Pool.SPOT, [0.0], busy_s=2.0),
            ItemResult("b", "w", Pool.TRAINER, [0.0], busy_s=3.0),  # the trainer's GPUs
        ]
    )
    assert watch.ledger.busy_s[Pool.SPOT] == 2.0
    assert watch.ledger.busy_s[Pool.ON_DEMAND] == 3.0


class Nodes:
    """The live nodes as the GCS would list them: the head with or without its trainer."""

    def __init__(self):
        self.trainer, self.reads = True, 0

    def __call__(self):
        self.reads += 1
        head = {"control": 1.0, "trainer_gpu": 2.0} if self.trainer else {"control": 1.0}
        return [NodeType("node 10.0.0.1", head, 1), NodeType("node 10.0.0.2", {"spot": 1}, 1)]


def _capacity(autoscaled, lines):
    nodes = Nodes()
    log = SimpleNamespace(write=lines.append, flush=lambda: None, isatty=lambda: False)
    return nodes, CapacityWatch(nodes, job_roles(2, 1, 1, 0.0), autoscaled, log)


def test_a_cluster_without_an_autoscaler_stops_the_run_on_the_second_read_that_lost_a_role(clock):
    lines = []
    nodes, cap = _capacity(False, lines)
    watch = _watch(clock, {"workers_by_pool": {}, "pending": 0})
    watch.capacity = cap
    watch.tick()
    clock.now += 1.0
    watch.tick()  # within NODE_CHECK_S of the first read: not read again
    assert nodes.reads == 1
    nodes.trainer = False
    clock.now += run_watch.NODE_CHECK_S
    watch.tick()  # one read without the trainer's node: a node declared dead may come back
    nodes.trainer = True
    clock.now += run_watch.NODE_CHECK_S
    watch.tick()  # it did: the count starts again
    nodes.trainer = False
    for _ in range(run_watch.NODE_CHECKS_LOST - 1):
        clock.now += run_watch.NODE_CHECK_S
        watch.tick()
    clock.now += run_watch.NODE_CHECK_S
    with pytest.raises(ClusterLost, match="no autoscaler to replace it: 2 trainer workers"):
        watch.tick()
    assert nodes.reads == 3 + run_watch.NODE_CHECKS_LOST
    assert lines == []


def test_a_cluster_with_an_autoscaler_says_once_what_it_waits_for_and_goes_on(clock):
    lines = []
    nodes, cap = _capacity(True, lines)
    nodes.trainer = False
    for _ in range(3):
        cap.check(clock.now)
        clock.now += run_watch.NODE_CHECK_S
    said = [ln for ln in lines if ln.strip()]
    assert len(said) == 1 and "waiting for the autoscaler to bring up: 2 trainer workers" in said[0]


def test_an_actor_that_does_not_answer_stops_the_run_with_the_reason(monkeypatch):
    import ray

    from spotlight.job import queue_client

    def never(ref, timeout=None):
        assert timeout == queue_client.CALL_TIMEOUT_S
        raise ray.exceptions.GetTimeoutError("timed out")

    monkeypatch.setattr(ray, "get", never)
    with pytest.raises(ClusterLost, match="the request queue has not answered for 120 s"):
        queue_client.answer(object(), "the request queue")
