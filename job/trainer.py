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
ends every worker's loop. After the last update the workers wait for the same stop, which the
controller posts once it has fetched that update: rank 0 owns its optimizer state.

With ``grpo.nft_old_ema`` (DiffusionNFT's EMA sampling policy, :mod:`spotlight.flow.old_policy`)
every rank keeps the same old copy of the trainable parameters (the same EMA step on the same
data-parallel weights), takes ``v_old`` from it and steps it after each update. The weights
published for the samplers (and sampled by ``trainer_samples``) are the old policy's; the
trained ones travel with the optimizer state: rank 0 posts the optimizer state, the trained
weights and the old policy as one blob (:func:`spotlight.flow.old_policy.pack_parts`), which the
controller unpacks into its checkpoint, and its Ray Train checkpoint holds all three.

With ``schedule="pipelined"`` the batch of iteration ``t`` was sampled on the weights before
update ``t - 1`` (:mod:`spotlight.training.pipeline`): every rank keeps a copy of the weights it
published last (``sampled_with``), DiffusionNFT's ``v_old`` for a batch sampled on them and the
weights ``trainer_samples`` samples that rollout's items with. Rank 0 posts that copy with the
update (part ``rollout_weights``) for the controller's checkpoint; a resumed trainer gets it
back and publishes it again, as the version before its own.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
import time
from functools import partial
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
    from spotlight.actors.weight_broadcast import Publisher
    from spotlight.config import Config
    from spotlight.flow.old_policy import OldPolicy, sampling_bytes, sampling_copy
    from spotlight.flow.sampler import Trajectory
    from spotlight.flow.update import grpo_update, training_state
    from spotlight.job import protocol
    from spotlight.policies import make_policy
    from spotlight.scheduling.gpu_placement import worker_device
    from spotlight.scheduling.storage import require_paths
    from spotlight.training.pipeline import ROLLOUT_LAG, old_policy_for, samples_lag

    _quiet_train_logs()
    torch.set_num_threads(config["threads"])
    cfg = Config.from_dict(config["cfg"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    require_paths(
        ray.util.get_node_ip_address(),
        f"trainer worker {rank}",
        {"policy.checkpoint": cfg.policy.checkpoint},
    )
    actors = get_actors()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    policy = make_policy(cfg.policy, worker_device(config["device"], ray.get_gpu_ids(), visible))
    optimizer, ref_policy = training_state(policy, cfg.grpo)
    old = OldPolicy.for_config(cfg.grpo, policy)
    pipelined = cfg.schedule == "pipelined"
    start, version, sampled_with = _restore(config, policy, optimizer, old)
    publisher = Publisher(actors.broadcast)  # rank 0's: it publishes the weights
    if rank == 0:
        if sampled_with is not None:  # a resumed pipeline: its next rollout's weights first
            blob = sampling_bytes(policy, sampled_with[1])
            publisher.publish(version - 1, start - 1, blob)
        publisher.publish(version, start, sampling_bytes(policy, old))
    keep = publisher.republish_if_lost if rank == 0 else None  # a broadcast restart lost it
    sync = _allreduce_mean if world > 1 else None
    sampler = _trainer_sampler(config, policy, cfg, rank, old)
    last_post = None
    for it in range(start, cfg.num_iterations):
        timeout = config["batch_timeout_s"]
        meanwhile = None
        if sampler is not None:  # sample rollout items while waiting for the batch
            meanwhile = partial(sampler.sample_waiting, actors.queue, version, sampled_with)
        (batch_ref,) = protocol.wait_batch(actors.queue, it, timeout, last_post, meanwhile, keep)
        batch = ray.get(batch_ref)
        if batch.get("stop"):  # the run ended before num_iterations
            break
        t0 = time.perf_counter()
        trajectories = [Trajectory.from_bytes(b) for b in batch["trajectories"]]
        lag = samples_lag(
            [t.weights_version for t in trajectories], version, ROLLOUT_LAG[cfg.schedule]
        )
        v_old = old_policy_for(cfg, lag, old, sampled_with[1] if sampled_with else None)
        if pipelined:  # these weights sample the next rollout
            sampled_with = (version, sampling_copy(policy, old))
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
            old_policy=v_old,
        )
        if old is not None:  # every rank: the same step on the same weights
            stats["nft_old_decay"] = old.step(policy, int(stats["num_optimizer_steps"]), cfg.grpo)
        if world > 1:
            dist.barrier()
        version += 1
        metrics = {
            "iteration": it,
            "weights_version": version,
            "train_s": time.perf_counter() - t0,
            **stats,
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            metrics["gpu_peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
        if rank == 0:
            rollout = sampled_with[1] if sampled_with is not None else None
            last_post = _publish(
                actors, policy, optimizer, it, version, metrics, world, old, rollout, publisher
            )
        else:
            ray.train.report(metrics)
    else:  # every update posted: stay until the driver has fetched the last one's objects
        if start < cfg.num_iterations:  # (a resumed finished run posted none)
            timeout = config["batch_timeout_s"]
            protocol.wait_end(actors.queue, cfg.num_iterations, timeout, last_post, keep)


def _restore(config: dict[str, Any], policy, optimizer, old=None):
    """Where the worker starts: Ray Train's own checkpoint after a worker failure, else the
    run's checkpoint (a resumed driver), else the recipe's weights. Returns (iterations done,
    weights version, and for a resumed pipeline ``(version - 1, copy)`` of the weights its
    next rollout samples with, else None); the policy, optimizer and old policy
    (``grpo.nft_old_ema``; None without) hold that state."""
    import ray.train

    from spotlight.flow.old_policy import OldPolicy, load_old_policy
    from spotlight.training.run_folder import OLD_POLICY_FILE, ROLLOUT_WEIGHTS_FILE

    start, version = config["start"], config["start_version"]
    resumed = ray.train.get_checkpoint()
    if resumed is not None:  # Ray Train restarted the workers after a failure
        parts = {}
        with resumed.as_directory() as d:
            state = json.loads((Path(d) / "state.json").read_text())
            files = {
                "policy": "policy.safetensors",
                "optimizer": "optimizer.pt",
                "old_policy": OLD_POLICY_FILE,
                "rollout_weights": ROLLOUT_WEIGHTS_FILE,
            }
            for name, file in files.items():
                if (Path(d) / file).exists():
                    parts[name] = (Path(d) / file).read_bytes()
        start, version = state["iterations_done"], state["weights_version"]
    elif config["initial"] is not None:  # a resumed run: the controller's checkpoint parts
        parts = ray.get(config["initial"][0])
    else:
        return start, version, None
    from safetensors.torch import load

    policy.load_state_dict(load(parts["policy"]))
    load_optimizer_bytes(optimizer, parts["optimizer"])
    load_old_policy(old, parts.get("old_policy"), "trainer restore")
    sampled_with = None
    if "rollout_weights" in parts:
        copy = OldPolicy(policy)
        copy.load_bytes(parts["rollout_weights"])
        sampled_with = (version - 1, copy)
    return start, version, sampled_with


def _trainer_sampler(config: dict[str, Any], policy, cfg, rank: int, old=None):
    """With ``trainer_samples``, the sampler that draws rollout items while the worker waits
    (with the old policy's weights swapped in, when there is one: the published ones)."""
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
        old_policy=old,
    )


def _publish(
    actors, policy, optimizer, it: int, version: int, metrics: dict, world: int, old=None,
    rollout=None, publisher=None,
):  # fmt: skip
    """Rank 0 after the update of ``it``: publish weights ``version`` (the old policy's, with
    one), post the update for the controller (protocol), report a Ray Train checkpoint. Returns
    the protocol's last post.

    The update's ``optimizer`` is the optimizer state's bytes, or with an old policy or a
    pipeline's ``rollout`` weights (the copy of the weights version ``version - 1``, which
    sample the next rollout) :func:`~spotlight.flow.old_policy.pack_parts` of ``optimizer``,
    ``policy`` (the trained weights), ``old_policy`` and ``rollout_weights``: the controller's
    checkpoint needs them all."""
    import ray.train

    from spotlight.flow.old_policy import pack_parts, sampling_bytes
    from spotlight.flow.weights import policy_bytes
    from spotlight.job import protocol
    from spotlight.training.run_folder import OLD_POLICY_FILE, ROLLOUT_WEIGHTS_FILE

    weights = policy_bytes(policy)
    opt = optimizer_bytes(optimizer)
    publisher.publish(version, it + 1, sampling_bytes(policy, old))
    posted = opt
    extra = {}
    if old is not None:
        extra[OLD_POLICY_FILE] = old.to_bytes()
    if rollout is not None:
        extra[ROLLOUT_WEIGHTS_FILE] = rollout.to_bytes()
    if extra:
        names = {OLD_POLICY_FILE: "old_policy", ROLLOUT_WEIGHTS_FILE: "rollout_weights"}
        parts = {names[f]: b for f, b in extra.items()}
        posted = pack_parts({"optimizer": opt, "policy": weights, **parts})
    update = {**metrics, "world_size": world, "optimizer": [ray.put(posted)]}
    last_post = protocol.post_update(actors.queue, it, update)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "policy.safetensors").write_bytes(weights)
        (Path(d) / "optimizer.pt").write_bytes(opt)
        for file, data in extra.items():
            (Path(d) / file).write_bytes(data)
        state = {"iterations_done": it + 1, "weights_version": version}
        (Path(d) / "state.json").write_text(json.dumps(state))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
    return last_post
