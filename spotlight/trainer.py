"""The GRPO trainer as a Ray Train ``TorchTrainer`` on on-demand capacity (a thin shell).

Each worker runs :func:`train_loop`: for every iteration it waits for the controller's training
batch (posted in the request queue's mailbox as ``train/<iteration>``), replays its data-parallel
slice of it through :func:`spotlight.update.grpo_update` with gradients averaged across workers
(DDP semantics; gloo on CPU, NCCL on GPU), and then rank 0

* publishes the new weights version to the ``WeightBroadcast`` actor,
* posts ``update/<iteration>`` (loss statistics, timings, the optimizer state as an object
  reference) for the controller, which writes the run's checkpoint, and
* reports metrics and a Ray Train checkpoint, from which Ray Train restarts failed workers
  (``FailureConfig``) without losing an update.

Before the first iteration, rank 0 publishes the weights it starts from, so samplers and
controller agree on version numbers from the start. A run that ends before ``num_iterations``
(it reached its target, or its wall cap) posts :data:`STOP_BATCH` as the next batch, which
ends every worker's loop.
"""

from __future__ import annotations

import io
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
import torch

MAILBOX_WAIT_S = 5.0
"""Long-poll slice of the trainer's wait for its next batch."""


STOP_BATCH = {"stop": True}
"""Posted as a training batch by a driver that ends the run early: the trainer's loop ends."""


def train_batch_key(iteration: int) -> str:
    return f"train/{iteration}"


def update_key(iteration: int) -> str:
    return f"update/{iteration}"


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> bytes:
    buf = io.BytesIO()
    torch.save(optimizer.state_dict(), buf)
    return buf.getvalue()


def load_optimizer_bytes(optimizer: torch.optim.Optimizer, data: bytes) -> None:
    optimizer.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))


def _allreduce_mean(params: list[torch.nn.Parameter]) -> None:
    import torch.distributed as dist

    world = dist.get_world_size()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p, g in zip(params, grads, strict=True):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def _wait_mailbox(queue, key: str, timeout_s: float, repost=None) -> Any:
    """The value posted under ``key``. ``repost = (incarnation, key, value)``: our last post;
    if the queue actor restarted since (a new incarnation: its mailbox is gone), post it again
    so the controller waiting for it gets it."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = ray.get(queue.wait_post.remote(key, MAILBOX_WAIT_S))
        if value is not None:
            return value
        repost = repost_if_restarted(queue, repost)
        if time.monotonic() > deadline:
            raise TimeoutError(f"trainer: nothing posted under {key!r} within {timeout_s:.0f} s")


def repost_if_restarted(queue, repost):
    """``repost = (incarnation, key, value)``: our last post. When the queue actor has
    restarted since (a new incarnation: its mailbox is gone), post it again; returns the
    repost to keep (None stays None)."""
    if repost is None:
        return None
    now = ray.get(queue.incarnation.remote())
    if now != repost[0]:
        ray.get(queue.post.remote(repost[1], repost[2]))
        return (now, repost[1], repost[2])
    return repost


def _quiet_train_logs() -> None:
    """Ray Train logs two lines per reported checkpoint; keep warnings only."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)
    try:  # its report logger is named after its file
        from ray.train.v2._internal.execution import context

        logging.getLogger(context.__file__).setLevel(logging.WARNING)
    except ImportError:  # pragma: no cover - other Ray versions
        pass


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train worker function (see the module docstring). ``config`` keys: ``cfg`` (the run's
    Config as a dict), ``start`` (iterations done), ``initial`` ([ref] of the starting
    checkpoint bytes or None), ``threads``, ``device``, ``batch_timeout_s``."""
    import ray.train
    import torch.distributed as dist

    from spotlight.actors.handles import get_actors
    from spotlight.actors.weight_broadcast import publish_weights
    from spotlight.config import Config
    from spotlight.policies import make_policy
    from spotlight.sampler import Trajectory
    from spotlight.update import grpo_update, training_state
    from spotlight.weights import policy_bytes

    _quiet_train_logs()
    torch.set_num_threads(config["threads"])
    cfg = Config.from_dict(config["cfg"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    actors = get_actors()
    policy = make_policy(cfg.policy, config["device"])
    optimizer, ref_policy = training_state(policy, cfg.grpo)
    start, version = config["start"], config["start_version"]
    resumed = ray.train.get_checkpoint()
    if resumed is not None:  # Ray Train restarted the workers after a failure
        with resumed.as_directory() as d:
            state = json.loads((Path(d) / "state.json").read_text())
            start_bytes = (Path(d) / "policy.safetensors").read_bytes()
            opt_bytes = (Path(d) / "optimizer.pt").read_bytes()
        start, version = state["iterations_done"], state["weights_version"]
    elif config["initial"] is not None:  # a resumed run: the controller's checkpoint
        start_bytes, opt_bytes = ray.get(config["initial"][0])
    else:
        start_bytes = opt_bytes = None
    if start_bytes is not None:
        from safetensors.torch import load

        policy.load_state_dict(load(start_bytes))
        load_optimizer_bytes(optimizer, opt_bytes)
    if rank == 0:
        publish_weights(actors.broadcast, version, start, policy_bytes(policy))
    sync = _allreduce_mean if world > 1 else None

    sampler = None
    if config.get("trainer_samples"):  # sample rollout items while waiting for the batch
        from spotlight.trainer_sampling import TrainerSampler

        sampler = TrainerSampler(
            policy,
            cfg.sampler,
            f"trainer-{rank}",
            config.get("sampler_threads", 1),
            config["threads"],
            config.get("commit_every", 0),
        )
    last_post = None
    for it in range(start, cfg.num_iterations):
        key, timeout = train_batch_key(it), config["batch_timeout_s"]
        if sampler is not None:
            (batch_ref,) = sampler.wait(actors.queue, key, version, timeout, last_post)
        else:
            (batch_ref,) = _wait_mailbox(actors.queue, key, timeout, last_post)
        batch = ray.get(batch_ref)
        if batch.get("stop"):  # the run ended before num_iterations
            break
        t0 = time.perf_counter()
        trajectories = [Trajectory.from_bytes(b) for b in batch["trajectories"]]
        stats = grpo_update(
            policy,
            optimizer,
            trajectories,
            torch.tensor(batch["advantages"], dtype=torch.float32),
            cfg.grpo,
            seed=batch["seed"],
            ref_policy=ref_policy,
            shard=(rank, world),
            grad_sync=sync,
        )
        if world > 1:
            dist.barrier()
        train_s = time.perf_counter() - t0
        version += 1
        metrics = {"iteration": it, "weights_version": version, "train_s": train_s, **stats}
        if rank == 0:
            weights = policy_bytes(policy)
            opt = optimizer_bytes(optimizer)
            publish_weights(actors.broadcast, version, it + 1, weights)
            update = {**metrics, "world_size": world, "optimizer": [ray.put(opt)]}
            incarnation = ray.get(actors.queue.incarnation.remote())
            ray.get(actors.queue.post.remote(update_key(it), update))
            last_post = (incarnation, update_key(it), update)
            with tempfile.TemporaryDirectory() as d:
                (Path(d) / "policy.safetensors").write_bytes(weights)
                (Path(d) / "optimizer.pt").write_bytes(opt)
                state = {"iterations_done": it + 1, "weights_version": version}
                (Path(d) / "state.json").write_text(json.dumps(state))
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)
