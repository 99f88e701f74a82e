"""The sampler replica's stop path when its constructor failed (no Ray started)."""

from __future__ import annotations

from types import SimpleNamespace


def test_a_replica_whose_constructor_failed_stops_its_sp_workers_and_nothing_else():
    from spotlight.deployments.sampler import SamplerReplica

    cls = SamplerReplica.func_or_class
    half = cls.__new__(cls)  # the constructor raised before the pull loop started
    half.__del__()  # nothing started, nothing to stop: no second error for Serve to log
    stopped = []
    half._sp = SimpleNamespace(shutdown=lambda: stopped.append(True))
    half.__del__()  # the SP workers it had started are stopped
    assert stopped == [True]
