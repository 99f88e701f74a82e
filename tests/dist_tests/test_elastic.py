"""Long-lived SP workers (real processes, gloo): groups re-formed after a loss without new
processes, weights from a peer through shared memory, nothing leaked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import spotlight
from spotlight.sp.elastic import NodeWorkers
from spotlight.sp.sp_groups import assign, valid_degrees


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().split()[2] != "Z"


def test_survivors_regroup_in_the_same_processes_and_a_joiner_copies_a_peer(tmp_path):
    ckpt = str(Path(spotlight.__file__).parent / "assets" / "ocr-mini.safetensors")
    nw = NodeWorkers(3)
    try:
        pids = dict(zip(nw.workers, nw.pids(), strict=True))
        nw.load([0, 1, 2], ckpt)
        first = nw.form([[0, 1, 2]])
        assert {r["sum"] for r in first["workers"].values()} == {6.0}  # 1 + 2 + 3
        nw.lose(2)
        assert not _alive(pids[2])
        valid = valid_degrees(4)
        again = nw.form(assign([0, 1], 2, valid))
        assert nw.groups == [[0, 1]]
        # the same processes: only the communicator was rebuilt
        assert {w: r["pid"] for w, r in again["workers"].items()} == {0: pids[0], 1: pids[1]}
        nw.start(3)  # a new member, empty
        copy = nw.copy_weights(0, 3)
        assert copy["wall_s"] > 0 and nw.checksum(3) == nw.checksum(0) != 0.0
        mixed = nw.form(assign([0, 1, 3], 2, valid))
        assert nw.groups == [[0, 1], [3]]
        assert mixed["workers"][3]["sum"] == 1.0
        live = nw.pids()
    finally:
        nw.shutdown()
    assert not any(_alive(p) for p in live)
    assert nw.workers == {}


def test_a_worker_lost_while_its_group_forms_leaves_survivors_that_regroup():
    """Worker 1 dies before it joins its group: worker 0 waits for it until ``timeout_s`` and
    gives up; the survivors then form a group of their own (one had formed and left one group
    meanwhile, the other only failed to form one: torch's group names must agree)."""
    from spotlight.sp.elastic import WorkerLost

    nw = NodeWorkers(3, timeout_s=2.0)
    try:
        nw.workers[1].proc.kill()
        nw.workers[1].proc.join()
        with pytest.raises(WorkerLost) as lost:
            nw.form([[0, 1], [2]])
        assert lost.value.dead == [1]
        nw.lose(1)
        again = nw.form([[0, 2]])
        assert nw.groups == [[0, 2]]
        assert {r["sum"] for r in again["workers"].values()} == {3.0}  # 1 + 2
        live = nw.pids()
    finally:
        nw.shutdown()
    assert not any(_alive(p) for p in live)


def test_bad_worker_counts_are_refused():
    with pytest.raises(ValueError, match="at least one worker"):
        NodeWorkers(0)


def test_a_worker_that_dies_or_stalls_while_starting_is_given_up_not_waited_for():
    from spotlight.sp.elastic import WorkerLost

    with pytest.raises(WorkerLost) as lost:  # torch refuses 0 threads: the child dies at once
        NodeWorkers(1, threads=0)
    assert lost.value.dead == [0]
    nw = NodeWorkers(1)
    try:
        nw.start_timeout_s = 0.0  # nothing is ready that fast
        with pytest.raises(WorkerLost) as lost:
            nw.start(1)
        assert lost.value.dead == [1] and list(nw.workers) == [0]
        nw.lose(1)  # a worker that never started: only dropped
        assert nw.checksum(0) == 0.0  # the others work on
        live = nw.pids()
    finally:
        nw.shutdown()
    assert not any(_alive(p) for p in live)
