"""Detached actors on a real local Ray: weight broadcast checks, bandit state persistence."""

from __future__ import annotations

import pytest
import torch

from spotlight.flow.weights import WeightsCorrupted, WeightsHeader, checksum, pack_state


def _blob(x: float) -> bytes:
    return pack_state({"w": torch.full((4,), x)})


def test_weight_broadcast_keeps_versions_and_refuses_corrupt_ones(local_ray):
    from spotlight.actors.weight_broadcast import WeightBroadcast, fetch_weights, publish_weights

    b = WeightBroadcast.remote(keep=2)
    for v in range(3):
        publish_weights(b, v, v, _blob(float(v)))
    assert local_ray.get(b.versions.remote()) == [1, 2]
    header, state = fetch_weights(b, 2)
    assert header.version == 2 and torch.equal(state["w"], torch.full((4,), 2.0))
    with pytest.raises(LookupError, match="gone"):
        fetch_weights(b, 0)
    with pytest.raises(TimeoutError):
        fetch_weights(b, 7, timeout_s=0.2)

    good = _blob(9.0)
    bad = bytearray(good)
    bad[-2] ^= 0xFF
    header = WeightsHeader(3, checksum(good), len(good), 3)
    with pytest.raises(WeightsCorrupted, match="refused"):
        local_ray.get(b.publish.remote(header, bytes(bad)))
    with pytest.raises(WeightsCorrupted, match="refused"):
        local_ray.get(b.publish.remote(header, good[:-5]))  # partial
    assert local_ray.get(b.versions.remote()) == [1, 2]  # nothing was stored
    local_ray.kill(b)


def test_bandit_state_survives_an_actor_restart(local_ray, tmp_path):
    from spotlight.actors.bandit_state import BanditState

    path = tmp_path / "bandit.json"
    a = BanditState.options(max_restarts=1).remote(str(path))
    local_ray.get(a.update.remote({"arm/easy": [3, 1.5]}))
    local_ray.kill(a, no_restart=False)  # Ray restarts it: __init__ runs again
    assert local_ray.get(a.get.remote("arm/easy")) == [3, 1.5]
    with pytest.raises(TypeError):
        local_ray.get(a.update.remote({"bad": object()}))
    local_ray.kill(a)


def test_request_queue_long_poll_returns_when_work_arrives(local_ray):
    from spotlight.actors.request_queue import RequestQueue
    from spotlight.scheduling.work_queue import ItemResult, WorkItem

    q = RequestQueue.remote(lease_s=30.0)
    local_ray.get(q.open_run.remote("t"))
    waiting = q.pull.remote("w", 1, None, "spot", 30.0)
    item = WorkItem("i0", "rollout", 0, 0, ("p",), (1,))
    local_ray.get(q.submit.remote([item]))
    assert local_ray.get(waiting, timeout=10) == [item]
    done = q.wait_results.remote(["i0"], 30.0)
    local_ray.get(q.complete.remote(ItemResult("i0", "w", "spot", [1.0])))
    assert local_ray.get(done, timeout=10)["i0"].rewards == [1.0]
    assert local_ray.get(q.wait_post.remote("nothing", 0.05)) is None
    local_ray.kill(q)
