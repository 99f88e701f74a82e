"""The driver <-> trainer protocol (job/protocol.py) and the queue client's restart handling,
against an in-memory request queue: no Ray, milliseconds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spotlight.job import protocol
from spotlight.job.options import RayOptions
from spotlight.job.queue_client import QueueClient
from spotlight.job.run_watch import RunWatch
from spotlight.scheduling.costs import Ledger, PriceTable


class _Call:
    def __init__(self, fn):
        self.remote = fn  # ray.get is the identity here, so .remote() returns the value


class FakeQueue:
    """The RequestQueue actor's mailbox and run: what the protocol uses of it."""

    def __init__(self):
        self.mailbox: dict = {}
        self.run_id = None
        self.generation = 0
        self.submitted: list = []
        for name in ("post", "wait_post", "take", "incarnation", "open_run", "configure"):
            setattr(self, name, _Call(getattr(self, "_" + name)))
        self.stats = _Call(lambda: {"run_id": self.run_id, "workers_by_pool": {}})
        self.submit = _Call(lambda items: self.submitted.extend(items) or len(items))

    def restart(self) -> None:
        """What ``max_restarts=-1`` does: a new actor with no state."""
        self.mailbox.clear()
        self.run_id = None
        self.generation += 1

    def _post(self, key, value):
        self.mailbox[key] = value

    def _wait_post(self, key, wait_s):
        return self.mailbox.get(key)

    def _take(self, key):
        return self.mailbox.pop(key, None)

    def _incarnation(self):
        return f"incarnation-{self.generation}"

    def _open_run(self, run_id):
        kept, self.run_id = self.run_id == run_id, run_id
        return kept

    def _configure(self, lease_s, spill):
        pass


@pytest.fixture
def queue(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "get", lambda x, timeout=None: x)
    monkeypatch.setattr(ray, "put", lambda x: ("ref", x))
    return FakeQueue()


def _client(queue) -> QueueClient:
    actors = SimpleNamespace(queue=queue)
    watch = RunWatch(lambda: client.call("stats"), Ledger(PriceTable()), RayOptions(), None)
    client = QueueClient(actors, "run-1", RayOptions(), None, watch)
    client.open()
    return client


def _update(version: int) -> dict:
    return {"weights_version": version, "optimizer": [f"opt-v{version}"]}


def test_one_iteration_of_the_hand_off(queue):
    client = _client(queue)
    protocol.post_batch(client, 0, {"seed": 7})
    (batch,) = protocol.wait_batch(queue, 0, timeout_s=1.0)
    assert batch == ("ref", {"seed": 7})
    last = protocol.post_update(queue, 0, _update(1))
    assert last == ("incarnation-0", "update/0", _update(1))
    assert protocol.await_update(client, 0) == {"weights_version": 1, "optimizer": "opt-v1"}
    assert list(queue.mailbox) == ["train/0"]  # the batch stays until the next update
    assert client._posted is None  # answered: not re-posted after a queue restart
    protocol.post_batch(client, 1, {"seed": 8})
    protocol.post_update(queue, 1, _update(2))
    protocol.await_update(client, 1)
    assert list(queue.mailbox) == ["train/1"]


def test_a_trainer_failing_between_its_post_and_its_checkpoint_trains_the_batch_again(
    queue, monkeypatch
):
    """Its update was taken, its Ray Train checkpoint never written: restarted from the one
    before, it finds the batch it trained still posted (a chaos run hung here: the restarted
    worker waited for a batch the controller had taken, the controller for the next update)."""
    client = _client(queue)
    protocol.post_batch(client, 3, {"seed": 3})
    protocol.wait_batch(queue, 3, timeout_s=1.0)
    protocol.post_update(queue, 3, _update(4))
    assert protocol.await_update(client, 3)["weights_version"] == 4
    protocol.post_batch(client, 4, {"seed": 4})
    # the worker dies; its restart (checkpoint: 3 iterations done) waits for train/3
    (batch,) = protocol.wait_batch(queue, 3, timeout_s=1.0)
    assert batch == ("ref", {"seed": 3})
    protocol.post_update(queue, 3, _update(4))  # the same update, posted again
    (batch,) = protocol.wait_batch(queue, 4, timeout_s=1.0)
    assert batch == ("ref", {"seed": 4})
    protocol.post_update(queue, 4, _update(5))
    assert protocol.await_update(client, 4)["weights_version"] == 5
    assert list(queue.mailbox) == ["train/4"]  # the repeated update/3 went with it


def test_an_update_whose_objects_died_with_the_worker_is_waited_for_again(queue, monkeypatch):
    import ray

    client = _client(queue)
    dead = {"weights_version": 2, "optimizer": ["dead-ref"]}

    def get(x, timeout=None):
        if x == "dead-ref":
            raise ray.exceptions.OwnerDiedError("dead-ref", "", "")
        return x

    monkeypatch.setattr(ray, "get", get)
    posts = iter([dead, _update(2)])  # the restarted worker posts it anew

    def wait_post(key, wait_s):
        if key == "update/1" and "update/1" not in queue.mailbox:
            queue.mailbox[key] = next(posts)
        return queue.mailbox.get(key)

    queue.wait_post = _Call(wait_post)
    protocol.post_batch(client, 1, {"seed": 1})
    assert protocol.await_update(client, 1) == {"weights_version": 2, "optimizer": "opt-v2"}


def test_a_stop_batch_ends_the_trainer_and_is_not_re_posted(queue):
    client = _client(queue)
    protocol.post_stop(client, 3)
    (batch,) = protocol.wait_batch(queue, 3, timeout_s=1.0)
    assert batch == ("ref", protocol.STOP_BATCH)
    assert client._posted is None


def test_the_trainer_re_posts_its_update_after_a_queue_restart(queue):
    last = protocol.post_update(queue, 4, {"weights_version": 5})
    assert protocol.repost_if_restarted(queue, last) == last  # same incarnation: nothing
    queue.restart()
    assert queue.mailbox == {}
    last = protocol.repost_if_restarted(queue, last)
    assert queue.mailbox == {"update/4": {"weights_version": 5}}
    assert last[0] == "incarnation-1"
    assert protocol.repost_if_restarted(queue, None) is None


def test_the_driver_re_posts_its_batch_and_items_after_a_queue_restart(queue):
    client = _client(queue)
    client._outstanding = {"r0-v0-0": "item"}
    protocol.post_batch(client, 2, {"seed": 1})
    queue.restart()
    client.call("stats")  # the restarted queue holds no run: reopened, re-posted, re-submitted
    assert queue.run_id == "run-1"
    assert queue.mailbox == {"train/2": [("ref", {"seed": 1})]}
    assert queue.submitted == ["item"]
    assert client.restarts == 1
    client.call("stats")  # the same run again: nothing more
    assert client.restarts == 1


def test_exploration_items_are_re_submitted_after_a_queue_restart_until_collected(queue):
    """A fixed exploration budget waits for every explored item: one the restarted queue
    never got would be waited for in vain (found by the chaos bench: a run hung there)."""
    client = _client(queue)
    queue.results = _Call(lambda ids: {})
    queue.drop = _Call(lambda ids: None)
    items = [SimpleNamespace(item_id=f"x{k}") for k in range(2)]
    client.submit(items)
    queue.submitted.clear()
    queue.restart()
    client.call("stats")
    assert [it.item_id for it in queue.submitted] == ["x0", "x1"]
    client.collect(["x0", "x1"])  # taken (or withdrawn): a later restart leaves them out
    queue.submitted.clear()
    queue.restart()
    client.call("stats")
    assert queue.submitted == []


def test_the_trainer_works_between_looks_at_its_mailbox(queue):
    # with work to do meanwhile (sampling rollout items), the mailbox is read without waiting
    # and the work runs until the batch is there; a restart meanwhile re-posts the update
    waits, calls = [], []
    wait_post = queue.wait_post.remote
    queue.wait_post = _Call(lambda key, wait_s: waits.append(wait_s) or wait_post(key, wait_s))
    last = protocol.post_update(queue, 1, {"weights_version": 2})

    def meanwhile():
        calls.append(len(calls))
        if len(calls) == 1:
            queue.restart()
        if len(calls) == 3:
            queue._post("train/2", ["batch"])

    assert protocol.wait_batch(queue, 2, 1.0, last, meanwhile) == ["batch"]
    assert calls == [0, 1, 2]
    assert waits == [0.0] * 4
    assert queue.mailbox["update/1"] == {"weights_version": 2}  # re-posted after the restart
    waits.clear()
    protocol.wait_batch(queue, 2, 1.0)
    assert waits == [protocol.MAILBOX_WAIT_S]


def test_after_its_last_update_the_trainer_waits_for_the_stop_and_a_missing_one_is_no_error(
    queue,
):
    # the worker owns the last update's objects: it returns only once the driver's stop is
    # there (posted after the driver fetched them); a queue restart meanwhile re-posts the
    # update, and a driver that never answers ends the wait without an error
    client = _client(queue)
    last = protocol.post_update(queue, 2, {"weights_version": 3})
    looks = []
    wait_post = queue.wait_post.remote

    def look(key, wait_s):
        looks.append(key)
        if len(looks) == 2:
            queue.restart()
        if len(looks) == 4:
            protocol.post_stop(client, 3)
        return wait_post(key, wait_s)

    queue.wait_post = _Call(look)
    protocol.wait_end(queue, 3, timeout_s=60.0, last_post=last)
    assert looks == ["train/3"] * 4
    assert queue.mailbox["update/2"] == {"weights_version": 3}  # re-posted after the restart
    queue.mailbox.clear()
    protocol.wait_end(queue, 3, timeout_s=0.0, last_post=None)  # nothing comes: it returns


class FakeBroadcast:
    """The WeightBroadcast actor's versions: what the publisher and readers use of it."""

    def __init__(self):
        self.versions: dict = {}
        self.publish = _Call(lambda header, data: self.versions.update({header.version: data}))
        self.header = _Call(lambda v: v in self.versions or None)
        self.get = _Call(lambda v: (v, [self.versions[v]]) if v in self.versions else None)


def test_the_trainer_publishes_its_weights_again_after_a_broadcast_restart(queue):
    # items still queued on the version before the newest (exploration submitted during the
    # update) need it too: both are published again, the oldest first
    from spotlight.actors.weight_broadcast import Publisher

    broadcast = FakeBroadcast()
    publisher = Publisher(broadcast)
    assert publisher.republish_if_lost() == []  # nothing published yet: nothing to do
    for v in (1, 2, 3):
        publisher.publish(v, v - 1, f"weights-v{v}".encode())
    assert publisher.republish_if_lost() == []  # all still there
    broadcast.versions.clear()  # restarted with no versions (max_restarts=-1)
    looks = []

    def keep():  # the wait calls it between looks; the batch comes after the first
        looks.append(publisher.republish_if_lost())
        queue._post("train/3", ["batch"])

    assert protocol.wait_batch(queue, 3, 1.0, keep=keep) == ["batch"]
    assert looks == [[2, 3]]
    assert list(broadcast.versions) == [2, 3]
    assert broadcast.versions[2] == b"weights-v2"
