"""Trace parsing (every shipped format), scaling, windows and the replay as node events."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from spotlight.scheduling.traces import (
    TRACES_DIR,
    CapacityTrace,
    NodeEvent,
    TraceInjector,
    load_trace,
    replay_events,
    union,
)

SHIPPED = sorted(p for p in TRACES_DIR.glob("*/*") if p.suffix in (".json", ".csv"))


def test_every_shipped_trace_parses():
    assert len(SHIPPED) == 7
    for p in SHIPPED:
        tr = load_trace(p)
        assert tr.max_count >= 1, p
        assert tr.times_s[0] == 0.0
        assert tr.duration_s >= tr.times_s[-1]
        # merged: no two consecutive equal counts
        assert all(a != b for a, b in pairwise(tr.counts))


def test_skypilot_counts_match_the_raw_ticks():
    p = TRACES_DIR / "skypilot" / "preemption-4node-aws-us-east-1f-v100.json"
    doc = json.loads(p.read_text())
    gap, data = doc["metadata"]["gap_seconds"], doc["data"]
    tr = load_trace(p)
    for i in range(0, len(data), 37):
        assert tr.capacity_at(i * gap + 1) == data[i]
    assert tr.duration_s == len(data) * gap
    drops = sum(max(0, a - b) for a, b in pairwise(data))
    assert tr.preemptions() == drops


def test_oobleck_counts_follow_adds_and_removes(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("0,add,a\n0,add,b\n1000,add,c\n2500,remove,a\n2500,remove,b\n4000,add,a\n")
    tr = load_trace(p)
    assert tr.times_s == (0.0, 1.0, 2.5, 4.0)
    assert tr.counts == (2, 3, 1, 2)
    assert tr.preemptions() == 2
    real = load_trace(TRACES_DIR / "oobleck" / "p3-trace.csv")
    rows = (TRACES_DIR / "oobleck" / "p3-trace.csv").read_text().split()
    adds = sum(",add," in r for r in rows)
    removes = sum(",remove," in r for r in rows)
    assert real.counts[-1] == adds - removes


def test_bare_name_finds_a_shipped_trace_and_errors_are_clear(tmp_path):
    assert load_trace("p3-trace.csv").name == "p3-trace"
    with pytest.raises(FileNotFoundError, match="shipped traces"):
        load_trace(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [1]}')
    with pytest.raises(ValueError, match="not a SkyPilot trace"):
        load_trace(bad)
    odd = tmp_path / "x.txt"
    odd.write_text("1")
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(odd)
    csv_bad = tmp_path / "b.csv"
    csv_bad.write_text("0,add,a\n10,explode,a\n")
    with pytest.raises(ValueError, match="unknown event"):
        load_trace(csv_bad)


def test_scaled_and_window():
    tr = CapacityTrace("t", (0.0, 10.0, 20.0, 30.0), (16, 8, 0, 12), 40.0)
    assert tr.scaled(4).counts == (4, 2, 0, 3)
    assert tr.scaled(0).counts == (0,)
    w = tr.window(15.0, 10.0)
    assert w.times_s == (0.0, 5.0) and w.counts == (8, 0) and w.duration_s == 10.0
    with pytest.raises(ValueError, match="outside"):
        tr.window(50.0)


def test_replay_preempts_with_notices_and_adds_back():
    tr = CapacityTrace("t", (0.0, 100.0, 200.0), (3, 1, 2), 300.0)
    events = replay_events(tr, time_scale=10.0, notice_s=2.0, seed=1)
    kinds = [(e.at_s, e.kind) for e in events]
    assert kinds[:3] == [(0.0, "add")] * 3
    notices = [e for e in events if e.kind == "notice"]
    removes = [e for e in events if e.kind == "remove"]
    assert len(notices) == len(removes) == 2
    assert {e.slot for e in notices} == {e.slot for e in removes}
    assert all(e.at_s == 8.0 and e.deadline_s == 10.0 for e in notices)
    assert [e for e in events if e.kind == "add"][-1] == NodeEvent(20.0, "add", 3)
    # deterministic for a seed
    assert replay_events(tr, 10.0, 2.0, seed=1) == events


def test_replay_hard_share_and_no_notice_before_the_node_exists():
    tr = CapacityTrace("t", (0.0, 1.0, 2.0), (0, 1, 0), 3.0)
    ev = replay_events(tr, time_scale=1.0, notice_s=30.0)
    assert [(e.at_s, e.kind) for e in ev] == [(1.0, "add"), (1.0, "notice"), (2.0, "remove")]
    hard = replay_events(tr, time_scale=1.0, notice_s=30.0, hard_share=1.0)
    assert [e.kind for e in hard] == ["add", "kill"]
    assert [e.kind for e in replay_events(tr, 1.0, notice_s=0.0)] == ["add", "kill"]
    with pytest.raises(ValueError):
        replay_events(tr, 0.0, 1.0)


class FakeNodes:
    def __init__(self):
        self.live: dict[int, str] = {}
        self.calls: list[tuple] = []

    def add(self, slot):
        assert slot not in self.live
        self.live[slot] = "up"
        self.calls.append(("add", slot))

    def drain(self, slot, deadline):
        assert self.live[slot] == "up"
        self.live[slot] = "draining"
        self.calls.append(("drain", slot, deadline))

    def remove(self, slot, graceful):
        assert slot in self.live
        assert (self.live.pop(slot) == "draining") == graceful
        self.calls.append(("remove", slot, graceful))


def test_injector_applies_events_in_time_and_counts_them():
    tr = load_trace("preemption-4node-aws-us-east-1f-v100.json").window(0, 24 * 3600)
    events = replay_events(tr, time_scale=3600.0, notice_s=1.0, hard_share=0.5, seed=3)
    nodes = FakeNodes()
    inj = TraceInjector(events, nodes, start_unix_s=1000.0)
    assert inj.tick(999.0) == []
    t = 1000.0
    while not inj.done:
        t = inj.next_at_unix_s()
        inj.tick(t)
        assert len(nodes.live) == tr.capacity_at((t - 1000.0) * 3600.0 + 1e-6) or any(
            s == "draining" for s in nodes.live.values()
        )
    assert inj.stats.preemptions == tr.preemptions()
    assert inj.stats.notices == inj.stats.removed_after_notice
    assert inj.stats.killed > 0 and inj.stats.removed_after_notice > 0
    assert len(nodes.live) == tr.counts[-1]


def test_a_rotated_trace_is_the_same_loop_met_from_another_point():
    t = CapacityTrace("x", (0.0, 10.0, 30.0), (2, 0, 3), 50.0)
    r = t.rotated(20.0)
    assert r.duration_s == 50.0 and r.times_s[0] == 0.0
    for x in (0.0, 5.0, 9.9, 10.0, 29.9, 30.0, 40.0, 49.9):
        assert r.capacity_at(x) == t.capacity_at((x + 20.0) % 50.0), x
    assert t.rotated(0.0) is t and t.rotated(70.0) == r  # modulo the duration


def test_union_of_pools_sums_their_capacity_over_the_shortest_trace():
    a = CapacityTrace("a", (0.0, 10.0, 20.0), (2, 0, 1), 40.0)
    b = CapacityTrace("b", (0.0, 15.0), (1, 0), 30.0)
    both = union([a, b])
    assert both.name == "a+b" and both.duration_s == 30.0
    assert [both.capacity_at(t) for t in (0, 9, 10, 14, 15, 19, 20, 29)] == [3, 3, 1, 1, 0, 0, 1, 1]
    assert both.times_s == (0.0, 10.0, 15.0, 20.0)  # unchanged steps merged
    assert union([a]) is a
    with pytest.raises(ValueError):
        union([])


def test_load_trace_reads_a_plus_joined_name_as_the_union_of_shipped_traces():
    names = [
        "preemption-4node-aws-us-east-1f-v100.json",
        "preemption-4node-aws-us-east-2a-v100.json",
    ]
    one, two = (load_trace(n) for n in names)
    both = load_trace("+".join(names))
    assert both.name == f"{one.name}+{two.name}"
    assert both.duration_s == min(one.duration_s, two.duration_s)
    for t in (0.0, 3600.0, both.duration_s / 2):
        assert both.capacity_at(t) == one.capacity_at(t) + two.capacity_at(t)


def test_the_local_spot_cluster_s_dashboard_moves_off_a_port_in_use():
    """Two local trace replays (or a test beside one) must not fight over Ray's dashboard port:
    ``ray.cluster_utils.Cluster`` fails on a port in use instead of moving on."""
    import socket

    from spotlight.ports import free_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        other = free_port(busy)
        assert other != busy and other > 0
    assert free_port(other) == other  # free again: the preferred port is kept
