"""The GRPO trainer as a Ray Train ``TorchTrainer`` on on-demand capacity (a thin shell).

Each worker runs :func:`train_loop`: for every iteration it waits for the controller's training
batch (``train/<iteration>`` in the request queue's mailbox; :mod:`spotlight.job.protocol` has
the whole hand-off), replays its data-parallel
slice of it through :func:`spotlight.flow.update.grpo_update` with gradients averaged across workers
(DDP semantics; gloo on CPU, NCCL on GPU), and then rank 0

* publishes the new weights version to the ``WeightBroadcast`` actor,
* posts ``update/<iteration>`` (loss statistics, timings, the optimizer state as an object
  reference) for the controller, which writes the run's checkpoint, and
* reports metrics and a Ray Train checkpoint, from which Ray Train restarts failed workers
  (``FailureConfig``) without losing an update.

Before the first iteration, rank 0 publishes the weights it starts from, so samplers and
controller agree on version numbers from the start. A run that ends before ``num_iterations``
(it reached its target, or its wall cap) posts ``protocol.STOP_BATCH`` as the next batch, which
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

import torch


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
    checkpoint bytes or None), ``threads``, ``device``, ``batch_timeout_s``, and for
    ``trainer_samples`` its ``sampler_threads`` and ``commit_every``."""
    import ray.train
    import torch.distributed as dist

    from spotlight.actors.handles import get_actors
    from spotlight.actors.weight_broadcast import publish_weights
    from spotlight.config import Config
    from spotlight.flow.sampler import Trajectory
    from spotlight.flow.update import grpo_update, training_state
    from spotlight.flow.weights import policy_bytes
    from spotlight.job import protocol
    from spotlight.policies import make_policy

    _quiet_train_logs()
    torch.set_num_threads(config["threads"])
    cfg = Config.from_dict(config["cfg"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    actors = get_actors()
    policy = make_policy(cfg.policy, config["device"])
    optimizer, ref_policy = training_state(policy, cfg.grpo)
    start, version = _restore(config, policy, optimizer)
    if rank == 0:
        publish_weights(actors.broadcast, version, start, policy_bytes(policy))
    sync = _allreduce_mean if world > 1 else None
    sampler = _trainer_sampler(config, policy, cfg, rank)
    last_post = None
    for it in range(start, cfg.num_iterations):
        timeout = config["batch_timeout_s"]
        if sampler is not None:  # sample rollout items while waiting for the batch
            (batch_ref,) = sampler.wait(actors.queue, it, version, timeout, last_post)
        else:
            (batch_ref,) = protocol.wait_batch(actors.queue, it, timeout, last_post)
        batch = ray.get(batch_ref)
        if batch.get("stop"):  # the run ended before num_iterations
            break
        t0 = time.perf_counter()
        stats = grpo_update(
            policy,
            optimizer,
            [Trajectory.from_bytes(b) for b in batch["trajectories"]],
            torch.tensor(batch["advantages"], dtype=torch.float32),
            cfg.grpo,
            seed=batch["seed"],
            ref_policy=ref_policy,
            shard=(rank, world),
            grad_sync=sync,
        )
        if world > 1:
            dist.barrier()
        version += 1
        metrics = {
            "iteration": it,
            "weights_version": version,
            "train_s": time.perf_counter() - t0,
            **stats,
        }
        if rank == 0:
            last_post = _publish(actors, policy, optimizer, it, version, metrics, world)
        else:
            ray.train.report(metrics)


def _restore(config: dict[str, Any], policy, optimizer) -> tuple[int, int]:
    """Where the worker starts: Ray Train's own checkpoint after a worker failure, else the
    run's checkpoint (a resumed driver), else the recipe's weights. Returns (iterations done,
    weights version); the policy and optimizer hold that state."""
    import ray.train

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
        return start, version
    from safetensors.torch import load

    policy.load_state_dict(load(start_bytes))
    load_optimizer_bytes(optimizer, opt_bytes)
    return start, version


def _trainer_sampler(config: dict[str, Any], policy, cfg, rank: int):
    """With ``trainer_samples``, the sampler that draws rollout items while the worker waits."""
    if not config.get("trainer_samples"):
        return None
    from spotlight.job.trainer_sampling import TrainerSampler

    return TrainerSampler(
        policy,
        cfg.sampler,
        f"trainer-{rank}",
        config.get("sampler_threads", 1),
        config["threads"],
        config.get("commit_every", 0),
    )


def _publish(actors, policy, optimizer, it: int, version: int, metrics: dict, world: int):
    """Rank 0 after the update of ``it``: publish weights ``version``, post the update for the
    controller (protocol), report a Ray Train checkpoint. Returns the protocol's last post."""
    import ray.train

    from spotlight.actors.weight_broadcast import publish_weights
    from spotlight.flow.weights import policy_bytes
    from spotlight.job import protocol

    weights = policy_bytes(policy)
    opt = optimizer_bytes(optimizer)
    publish_weights(actors.broadcast, version, it + 1, weights)
    update = {**metrics, "world_size": world, "optimizer": [ray.put(opt)]}
    last_post = protocol.post_update(actors.queue, it, update)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "policy.safetensors").write_bytes(weights)
        (Path(d) / "optimizer.pt").write_bytes(opt)
        state = {"iterations_done": it + 1, "weights_version": version}
        (Path(d) / "state.json").write_text(json.dumps(state))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
    return last_post
