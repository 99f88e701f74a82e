"""The driver <-> trainer protocol: how the controller and the Ray Train workers keep in step.

They are two loops in two places: the controller (the driver process) and the Ray Train
workers (on the on-demand GPUs). They meet in two detached actors: the ``WeightBroadcast``
(versioned weights) and a small mailbox in the ``RequestQueue`` actor (``post`` / ``wait_post``
/ ``take``, values keyed by the strings below; large values travel as ``[ObjectRef]``). Both
ends are in this module. One iteration ``t``, on weights version ``v``::

    controller                                     trainer (rank 0 posts and publishes)
    ----------                                     ------------------------------------
                                                   publish weights v (at start: its first)
    wait until weights v are published   <------
    roll out on v (queue items, replicas)          wait for train/t (meanwhile, with
                                                   trainer_samples, sample rollout items)
    post train/t = [ref(batch)]          ------>   update on the batch
    explore the next prompts on v                  publish weights v + 1
    wait for update/t                    <------   post update/t = {stats, [ref(optimizer)]}
    take update/t (and train/t - 1)                report a Ray Train checkpoint
    checkpoint the run (weights v + 1, optimizer, counters), then iteration t + 1

    stop before num_iterations (at n):
    post train/n = STOP_BATCH            ------>   every worker's loop ends

    after the last update (of n - 1), once its optimizer state is fetched:
    post train/n = STOP_BATCH            ------>   every worker returns
    (the workers own the update's objects: one that returned before the fetch took them along)

What a restart does:

- **The queue actor** restarts with no state (``max_restarts=-1``): its mailbox is empty and
  its ``incarnation`` is new. The controller's next ``stats`` call sees no run, reopens it and
  re-posts ``train/t`` if unanswered (``QueueClient``). The trainer, while it waits, compares
  the incarnation with the one of its last post and re-posts ``update/t`` (:func:`
  repost_if_restarted`). Neither waits for a message the other already sent.
- **A trainer worker** fails: Ray Train restarts the workers from their last reported
  checkpoint (iteration and weights); rank 0 publishes that version again and they wait for
  the next ``train/<t>``, which stays posted until the controller has taken ``update/t + 1``:
  a worker that failed between posting ``update/t`` and reporting its checkpoint trains
  ``train/t`` again (the same bits) and posts ``update/t`` anew, which the controller takes
  with the next update, or waits for when the first one's objects died with the worker.
- **The weights broadcast** restarts with no versions: the trainer's rank 0, while it waits,
  publishes its newest version again (``Publisher.republish_if_lost``); the controller's
  checkpoint waits for it (``read_published``), replicas wait as for any version.
- **The driver** restarts (``--resume``): it clears the mailbox and the broadcast, and starts a
  new trainer from the run's own checkpoint, which publishes its version first.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

MAILBOX_WAIT_S = 5.0
"""Long-poll slice of the trainer's wait for its next batch."""

STOP_BATCH = {"stop": True}
"""Posted as a training batch by a driver that ends the run early, and after the last update
once the driver has fetched it: the trainer's loop ends."""


def train_batch_key(iteration: int) -> str:
    return f"train/{iteration}"


def update_key(iteration: int) -> str:
    return f"update/{iteration}"


# -- The controller's end (through its QueueClient) ---------------------------------------
def post_batch(client, iteration: int, batch: dict[str, Any]) -> None:
    """Post the training batch of ``iteration`` (re-posted after a queue restart until the
    update answers it)."""
    import ray

    client.post(train_batch_key(iteration), [ray.put(batch)])


def await_update(client, iteration: int) -> dict[str, Any]:
    """The trainer's update of ``iteration`` (its weights are published by then), its
    ``optimizer`` fetched (bytes). The update leaves the mailbox; the batch stays until the
    next update is taken (with the previous iteration's messages): a trainer worker that fails
    after posting the update but before its Ray Train checkpoint is written restarts from the
    checkpoint before and trains this batch again, bit for bit the same. An update whose
    objects died with their worker is waited for again: that restarted worker posts it anew."""
    import ray

    while True:
        update = client.wait_post(
            update_key(iteration),
            f"update of iteration {iteration}",
            f"iteration {iteration + 1}: the trainer's update",
        )
        try:
            optimizer = ray.get(update["optimizer"][0])
        except (ray.exceptions.OwnerDiedError, ray.exceptions.ObjectLostError):
            client.call("take", update_key(iteration))
            continue
        client.answered(
            update_key(iteration), train_batch_key(iteration - 1), update_key(iteration - 1)
        )
        return {**update, "optimizer": optimizer}


def post_stop(client, iteration: int) -> None:
    """End the trainer's loop, which waits for the batch of ``iteration``."""
    import ray

    client.post(train_batch_key(iteration), [ray.put(STOP_BATCH)], repost=False)


# -- The trainer's end (rank 0 posts; every rank reads) ------------------------------------
def wait_batch(
    queue, iteration: int, timeout_s: float, last_post=None, meanwhile=None, keep=None
) -> Any:
    """The value posted as ``iteration``'s batch. ``last_post = (incarnation, key, value)``: the
    trainer's last post, re-posted if the queue restarted since (:func:`repost_if_restarted`).
    ``meanwhile()``: work done between looks at the mailbox (it waits itself, so the mailbox
    is then read without waiting); without it, the mailbox is long-polled. ``keep()``: called
    between looks too (rank 0 publishes its weights again if the broadcast restarted)."""
    import ray

    key = train_batch_key(iteration)
    deadline = time.monotonic() + timeout_s
    wait_s = MAILBOX_WAIT_S if meanwhile is None else 0.0
    while True:
        value = ray.get(queue.wait_post.remote(key, wait_s))
        if value is not None:
            return value
        if meanwhile is not None:
            meanwhile()
        if keep is not None:
            keep()
        last_post = repost_if_restarted(queue, last_post)
        if time.monotonic() > deadline:
            raise TimeoutError(f"trainer: nothing posted under {key!r} within {timeout_s:.0f} s")


def wait_end(queue, iterations: int, timeout_s: float, last_post, keep=None) -> None:
    """After the last update (of ``iterations - 1``): wait for the driver's stop, which it
    posts once it has fetched that update's objects (the worker owns them). The wait running
    out is not an error: every update is posted, and a driver that is gone needs nothing."""
    with contextlib.suppress(TimeoutError):
        wait_batch(queue, iterations, timeout_s, last_post, keep=keep)


def post_update(queue, iteration: int, update: dict[str, Any]) -> tuple[str, str, Any]:
    """Post ``iteration``'s update; returns the ``last_post`` to re-post after a restart."""
    import ray

    incarnation = ray.get(queue.incarnation.remote())
    ray.get(queue.post.remote(update_key(iteration), update))
    return (incarnation, update_key(iteration), update)


def repost_if_restarted(queue, last_post):
    """``last_post = (incarnation, key, value)``: the trainer's last post. When the queue
    actor has restarted since (a new incarnation: its mailbox is gone), post it again; returns
    the ``last_post`` to keep (None stays None)."""
    import ray

    if last_post is None:
        return None
    now = ray.get(queue.incarnation.remote())
    if now != last_post[0]:
        ray.get(queue.post.remote(last_post[1], last_post[2]))
        return (now, last_post[1], last_post[2])
    return last_post
