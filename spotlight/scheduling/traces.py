"""Spot capacity traces and their replay as node events, without Ray.

A trace says how many spot nodes exist over time. Two real formats are read (copies ship in
``spotlight/assets/traces``, sources in its README):

* SkyPilot (JSON): ``{"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}``, ``n_i`` nodes
  during tick ``i`` (from ``i * G`` seconds);
* Oobleck (CSV, no header): ``time_ms,add|remove,nodeN``; the capacity is the number of nodes
  present.

:func:`replay_events` turns a trace into node events for a local cluster: the trace's counts are
scaled to at most ``max_nodes`` nodes, its time is divided by ``time_scale``, and every lost node
becomes a preemption, with a notice ``notice_s`` seconds of wall time before the node goes (a
drain with a deadline), or, for a chosen share of them, without one (a hard kill).
:class:`TraceInjector` applies the events through a small node API, so the same logic drives
``ray.cluster_utils.Cluster`` (job/local_cluster.py) and the tests' fakes.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

TRACES_DIR = Path(__file__).resolve().parents[1] / "assets" / "traces"
"""The shipped traces (see its README for sources and licenses)."""


@dataclass(frozen=True)
class CapacityTrace:
    """Spot capacity as a step function: ``counts[i]`` nodes from ``times_s[i]`` on."""

    name: str
    times_s: tuple[float, ...]
    counts: tuple[int, ...]
    duration_s: float

    def __post_init__(self) -> None:
        if not self.times_s or len(self.times_s) != len(self.counts):
            raise ValueError(f"trace {self.name}: need as many change times as counts (>= 1)")
        if any(b <= a for a, b in zip(self.times_s, self.times_s[1:], strict=False)):
            raise ValueError(f"trace {self.name}: change times must increase")
        if any(c < 0 for c in self.counts):
            raise ValueError(f"trace {self.name}: negative node count")
        if self.duration_s < self.times_s[-1]:
            raise ValueError(f"trace {self.name}: duration ends before the last change")

    @property
    def max_count(self) -> int:
        return max(self.counts)

    def capacity_at(self, t_s: float) -> int:
        """Nodes at trace time ``t_s`` (the first count before the trace starts)."""
        i = bisect_right(self.times_s, t_s) - 1
        return self.counts[max(i, 0)]

    def preemptions(self) -> int:
        """Nodes lost over the trace (the sum of the count's drops)."""
        return sum(max(0, a - b) for a, b in zip(self.counts, self.counts[1:], strict=False))

    def scaled(self, max_nodes: int) -> CapacityTrace:
        """Counts mapped proportionally onto ``0..max_nodes`` (rounded; unchanged steps merged)."""
        if max_nodes < 0:
            raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
        top = self.max_count
        counts = [0 if top == 0 else round(c * max_nodes / top) for c in self.counts]
        return _merged(self.name, list(self.times_s), counts, self.duration_s)

    def window(self, start_s: float, duration_s: float | None = None) -> CapacityTrace:
        """The trace from ``start_s`` on (for ``duration_s``), re-timed to start at 0."""
        end = self.duration_s if duration_s is None else min(self.duration_s, start_s + duration_s)
        if not 0 <= start_s < end:
            raise ValueError(f"window start {start_s} is outside the trace (0..{self.duration_s})")
        times = [0.0]
        counts = [self.capacity_at(start_s)]
        for t, c in zip(self.times_s, self.counts, strict=True):
            if start_s < t < end:
                times.append(t - start_s)
                counts.append(c)
        return _merged(self.name, times, counts, end - start_s)

    def rotated(self, offset_s: float) -> CapacityTrace:
        """The trace looped and started ``offset_s`` in (modulo its duration), re-timed to 0:
        the same capacity pattern, met from another point of it (a trace window)."""
        if self.duration_s <= 0:
            return self
        off = offset_s % self.duration_s
        if off == 0:
            return self
        head = self.window(off)
        tail_t = [t for t in self.times_s if t < off]
        tail_c = [self.capacity_at(t) for t in tail_t]
        times = list(head.times_s) + [head.duration_s + t for t in tail_t]
        counts = list(head.counts) + tail_c
        return _merged(self.name, times, counts, self.duration_s)


def _merged(name: str, times: list[float], counts: list[int], duration_s: float) -> CapacityTrace:
    out_t, out_c = [times[0]], [counts[0]]
    for t, c in zip(times[1:], counts[1:], strict=True):
        if c != out_c[-1]:
            out_t.append(t)
            out_c.append(c)
    return CapacityTrace(name, tuple(out_t), tuple(out_c), duration_s)


def union(traces: list[CapacityTrace]) -> CapacityTrace:
    """The capacity of several spot pools used together (instance types or zones the sampler
    role may run on): at every time the sum of their node counts, over the shortest trace.
    Each trace is one pool's; treating the pools as independent is what this assumes."""
    if not traces:
        raise ValueError("a union needs at least one trace")
    if len(traces) == 1:
        return traces[0]
    end = min(t.duration_s for t in traces)
    times = sorted({0.0, *(x for t in traces for x in t.times_s if x < end)})
    counts = [sum(t.capacity_at(x) for t in traces) for x in times]
    return _merged("+".join(t.name for t in traces), times, counts, end)


def load_trace(path: str | Path) -> CapacityTrace:
    """Read a SkyPilot ``.json`` or Oobleck ``.csv`` trace. A bare file name is looked up among
    the shipped traces too (``preemption-4node-aws-us-east-1f-v100.json``). Names joined by
    ``+`` read as the :func:`union` of those traces (a sampler role spread over several pools)."""
    if isinstance(path, str) and "+" in path:
        return union([load_trace(part) for part in path.split("+")])
    p = Path(path)
    if not p.exists():
        shipped = sorted(TRACES_DIR.glob(f"*/{p.name}"))
        if not shipped:
            known = ", ".join(sorted(q.name for q in TRACES_DIR.glob("*/*.*") if q.suffix != ""))
            raise FileNotFoundError(f"no trace {path!s}; shipped traces: {known}")
        p = shipped[0]
    if p.suffix in (".json", ".csv"):
        trace = _load_skypilot(p) if p.suffix == ".json" else _load_oobleck(p)
        if trace.max_count == 0:
            raise ValueError(f"{p}: the trace never has a node (empty, or no capacity at all)")
        return trace
    raise ValueError(
        f"{p}: unknown trace format (expected .json from SkyPilot or .csv from Oobleck)"
    )


def _load_skypilot(p: Path) -> CapacityTrace:
    try:
        doc = json.loads(p.read_text())
        gap = float(doc["metadata"]["gap_seconds"])
        data = [int(n) for n in doc["data"]]
    except (ValueError, KeyError, TypeError, OverflowError) as e:
        raise ValueError(
            f"{p}: not a SkyPilot trace ({{'metadata': {{'gap_seconds'}}, 'data': [...]}}): {e}"
        ) from e
    if not data or not 0 < gap < math.inf:
        raise ValueError(f"{p}: empty trace or gap_seconds not > 0 (got {gap})")
    if min(data) < 0:
        raise ValueError(f"{p}: negative node count {min(data)}")
    return _merged(p.stem, [i * gap for i in range(len(data))], data, len(data) * gap)


def _load_oobleck(p: Path) -> CapacityTrace:
    present: set[str] = set()
    times, counts = [0.0], [0]
    try:
        text = p.read_text()
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not a text CSV ({e.reason} at byte {e.start})") from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise ValueError(f"{p}: not a CSV ({e})") from None
    for lineno, row in enumerate(rows, 1):
        if not row:
            continue
        try:
            t_ms, op, node = int(row[0]), row[1].strip(), row[2].strip()
        except (ValueError, IndexError) as e:
            raise ValueError(f"{p}:{lineno}: expected time_ms,add|remove,node: {row}") from e
        if op == "add":
            present.add(node)
        elif op == "remove":
            present.discard(node)
        else:
            raise ValueError(f"{p}:{lineno}: unknown event {op!r} (add or remove)")
        t = t_ms / 1000.0
        if t < times[-1]:
            raise ValueError(f"{p}:{lineno}: time goes backwards")
        if t == times[-1]:
            counts[-1] = len(present)
        else:
            times.append(t)
            counts.append(len(present))
    return _merged(p.stem, times, counts, times[-1])


@dataclass(frozen=True)
class NodeEvent:
    """One change to the local spot nodes, at ``at_s`` seconds of wall time into the replay."""

    at_s: float
    kind: str
    """'add', 'notice' (drain with a deadline ``notice_s`` later), 'remove' (the node goes,
    after its notice), or 'kill' (the node goes without a notice)."""
    slot: int
    """Which node: slots are numbered as nodes are added, so a test can follow one node."""
    deadline_s: float | None = None
    """For 'notice': the wall time the node will be removed at."""


def replay_events(
    trace: CapacityTrace,
    time_scale: float,
    notice_s: float,
    hard_share: float = 0.0,
    seed: int = 0,
) -> list[NodeEvent]:
    """Node events replaying ``trace`` (already scaled to the node count) ``time_scale`` times
    faster than real time.

    A drop of the capacity at trace time ``t`` preempts that many nodes at wall time
    ``t / time_scale``: their notice comes ``notice_s`` earlier (never before the node was
    added), and a ``hard_share`` of the preemptions (chosen with ``seed``) get no notice. The
    victims are drawn at random among the live nodes; a rise adds nodes.
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if notice_s < 0 or not 0.0 <= hard_share <= 1.0:
        raise ValueError(
            f"need notice_s >= 0 and 0 <= hard_share <= 1 (got {notice_s}, {hard_share})"
        )
    rng = random.Random(seed)
    live: list[int] = []
    added_at: dict[int, float] = {}
    next_slot = 0
    events: list[NodeEvent] = []
    previous = 0
    for t, count in zip(trace.times_s, trace.counts, strict=True):
        at = t / time_scale
        for _ in range(count - previous):
            events.append(NodeEvent(at, "add", next_slot))
            live.append(next_slot)
            added_at[next_slot] = at
            next_slot += 1
        for _ in range(previous - count):
            slot = live.pop(rng.randrange(len(live)))
            if notice_s == 0 or rng.random() < hard_share:
                events.append(NodeEvent(at, "kill", slot))
            else:
                notice_at = max(added_at[slot], at - notice_s)  # no notice before the node exists
                events.append(NodeEvent(notice_at, "notice", slot, deadline_s=at))
                events.append(NodeEvent(at, "remove", slot))
        previous = count
    order = {"remove": 0, "kill": 0, "add": 1, "notice": 2}
    return sorted(events, key=lambda e: (e.at_s, order[e.kind], e.slot))


class NodeAPI(Protocol):
    """What the injector needs from a cluster (job/local_cluster.py; fakes in tests)."""

    def add(self, slot: int) -> None: ...

    def drain(self, slot: int, deadline_unix_s: float) -> None: ...

    def remove(self, slot: int, graceful: bool) -> None: ...


@dataclass
class InjectorStats:
    added: int = 0
    notices: int = 0
    removed_after_notice: int = 0
    killed: int = 0

    @property
    def preemptions(self) -> int:
        return self.removed_after_notice + self.killed


class TraceInjector:
    """Applies :func:`replay_events` to a cluster as time passes: call :meth:`tick` often (from
    the thread that may add nodes: for ``ray.cluster_utils.Cluster``, the main thread)."""

    def __init__(self, events: list[NodeEvent], nodes: NodeAPI, start_unix_s: float):
        self.events = list(events)
        self.nodes = nodes
        self.start = start_unix_s
        self._next = 0
        self.stats = InjectorStats()
        self.log: list[str] = []

    @property
    def done(self) -> bool:
        return self._next >= len(self.events)

    def next_at_unix_s(self) -> float:
        return math.inf if self.done else self.start + self.events[self._next].at_s

    def tick(self, now_unix_s: float) -> list[NodeEvent]:
        """Apply every event due by ``now_unix_s``; returns them."""
        applied = []
        while not self.done and self.start + self.events[self._next].at_s <= now_unix_s:
            ev = self.events[self._next]
            self._next += 1
            if ev.kind == "add":
                self.nodes.add(ev.slot)
                self.stats.added += 1
            elif ev.kind == "notice":
                assert ev.deadline_s is not None
                self.nodes.drain(ev.slot, self.start + ev.deadline_s)
                self.stats.notices += 1
            elif ev.kind == "remove":
                self.nodes.remove(ev.slot, graceful=True)
                self.stats.removed_after_notice += 1
            else:
                self.nodes.remove(ev.slot, graceful=False)
                self.stats.killed += 1
            self.log.append(f"t+{ev.at_s:.1f}s {ev.kind} spot node {ev.slot}")
            applied.append(ev)
        return applied
