"""A replica's SP groups through losses (spotlight/sp/replica_groups.py), against an in-memory
stand-in for the worker processes: a loss during a step regroups the survivors and redoes the
step on the groups they form, the lost workers are replaced before the next item, and a
replacement that fails leaves the replica on the groups it has."""

import pytest

from spotlight.sp import replica_groups
from spotlight.sp.elastic import WorkerLost


class FakeWorkers:
    """NodeWorkers' surface: ``workers``, ``groups``; calls fail with WorkerLost on cue."""

    def __init__(self, n, threads):
        self.workers = dict.fromkeys(range(n))
        self.groups: list[list[int]] = []
        self.die_in_sample: list[int] = []  # workers that die during the next sample
        self.join_fails = False
        self.sampled: list[list[list[int]]] = []

    def form(self, groups):
        self.groups = [list(g) for g in groups]

    def lose(self, wid):
        self.workers.pop(wid, None)
        self.groups = [[w for w in g if w != wid] for g in self.groups]

    def set_weights(self, state, policy):
        pass

    def sample_groups(self, groups, parts, sampler, version, steps):
        if self.die_in_sample:
            dead, self.die_in_sample = self.die_in_sample, []
            raise WorkerLost(dead)
        self.sampled.append(groups)
        return [list(resume) for _, _, resume in parts]

    def join(self, wids, peer):
        assert peer in self.workers
        if self.join_fails:
            raise OSError("no GPU")
        self.workers.update(dict.fromkeys(wids))

    def shutdown(self):
        pass


class Traj:
    def __init__(self, i):
        self.i = i

    def to_bytes(self):
        return self.i


@pytest.fixture
def groups(monkeypatch):
    monkeypatch.setattr(replica_groups, "NodeWorkers", FakeWorkers)
    monkeypatch.setattr(replica_groups.Trajectory, "from_bytes", staticmethod(Traj))
    counters = {"sp_regroups": 0, "sp_regrowths": 0, "sp_regrow_failures": 0}
    g = replica_groups.ReplicaGroups(4, 1, 4, 4, counters)
    g.set_weights({}, {})
    return g


def test_the_first_weights_form_one_group_of_the_degree(groups):
    assert groups.nodes.groups == [[0, 1, 2, 3]] and groups.group_degree == 4


def test_a_loss_during_a_step_regroups_and_redoes_the_step_on_every_group(groups):
    groups.nodes.die_in_sample = [2]
    out = groups.step(list("abcdef"), list(range(6)), [Traj(i) for i in range(6)], {}, 1)
    assert [t.i for t in out] == list(range(6))  # every sample back, in order
    assert groups.nodes.sampled == [[[0, 1], [3]]]  # 3 survivors of SP 4 (4 heads): 2 + 1
    assert groups.counters["sp_regroups"] == 1 and groups.lost == [2]
    assert groups.group_degree == 2


def test_the_lost_workers_are_replaced_before_the_next_item(groups):
    groups.nodes.die_in_sample = [1, 3]
    groups.step(["a"] * 4, [0] * 4, [Traj(i) for i in range(4)], {}, 1)
    groups.regrow()
    assert groups.nodes.groups == [[0, 1, 2, 3]] and groups.lost == []
    assert groups.counters["sp_regrowths"] == 1 and len(groups.regrow_s) == 1


def test_a_failed_replacement_is_given_up_and_the_survivors_carry_on(groups):
    groups.nodes.die_in_sample = [0]
    groups.step(["a"] * 4, [0] * 4, [Traj(i) for i in range(4)], {}, 1)
    groups.nodes.join_fails = True
    groups.regrow()
    assert groups.nodes.groups == [[1, 2], [3]] and groups.lost == []
    assert groups.counters["sp_regrow_failures"] == 1 and groups.counters["sp_regrowths"] == 0


def test_losing_every_worker_is_an_error(groups):
    groups.nodes.die_in_sample = [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="every SP worker"):
        groups.step(["a"], [0], [Traj(0)], {}, 1)
