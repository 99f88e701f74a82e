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


def test_polled_actor_calls_leave_no_task_events(tmp_path):
    """Long polls, heartbeats and weight lookups record no task event (the GCS's task table
    and the dashboard's task list would grow by them every second); other calls still do."""
    import subprocess
    import sys

    code = (
        "import time, ray\n"
        "from ray.util.state import list_tasks\n"
        "from spotlight.actors.request_queue import RequestQueue\n"
        "from spotlight.actors.weight_broadcast import WeightBroadcast\n"
        "ctx = ray.init(address='local', num_cpus=1, include_dashboard=True,"
        " dashboard_host='127.0.0.1')\n"
        "api = 'http://' + ctx.dashboard_url\n"
        "q, b = RequestQueue.remote(), WeightBroadcast.remote()\n"
        "ray.get(q.open_run.remote('r'))\n"
        "for _ in range(5):\n"
        "    ray.get([q.pull.remote('w', 1), q.heartbeat.remote('w'), b.header.remote(1)])\n"
        "names = set()\n"
        "for _ in range(30):  # task events reach the GCS about once a second\n"
        "    names = {t.name for t in list_tasks(api, limit=1000, raise_on_missing_output=False)}\n"
        "    if 'RequestQueue.open_run' in names:\n"
        "        break\n"
        "    time.sleep(1)\n"
        "print('NAMES', sorted(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("NAMES")] or [out.stderr[-3000:]]
    assert "RequestQueue.open_run" in line, line  # the control: an ordinary call is recorded
    for polled in ("RequestQueue.pull", "RequestQueue.heartbeat", "WeightBroadcast.header"):
        assert polled not in line, line
