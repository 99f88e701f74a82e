"""The trainer's GPUs sample rollout items while they wait for the rollout (``trainer_samples``).

A Ray Train worker idles from the end of one update to the moment the controller posts the
next training batch, which is exactly while the rollout runs (in a pipelined run, what is left
of the rollout sampled during the update, on the weights before it). With
``RayOptions.trainer_samples`` each worker spends that wait pulling the rollout's items from the
request queue, as a sampler replica does: it holds the fresh weights already (the version it
just published; a pipelined one also a copy of the version before), samples the
item's seeds, commits its state every ``commit_every`` steps, has the reward deployment score
the images and completes the item. It pulls as pool ``trainer``: rollout items only, at once
(no spill wait); the controller does not bill its GPUs twice (they are on-demand GPUs held for
the whole run: its busy time counts as on-demand) and leaves its samples out of the samplers'
measured throughput, which sizes the exploration budget. The simulator measures what this is
worth on spot traces (``System.trainer_samples``, docs/simulator.md).

Sampling here is the replicas' code path (``spotlight.flow.sampler``) with the replicas' torch
thread count, so a sample's bits do not depend on who drew it (the seed contract).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import ray
import torch

from spotlight.scheduling.work_queue import ItemResult, Kind, Pool

MAILBOX_POLL_S = 0.5
"""How long one wait for an item lasts before the worker looks for its training batch again."""


@dataclass
class TrainerSampler:
    """Samples rollout items of ``version`` on the trainer worker's policy."""

    policy: Any
    sampler: Any
    """The run's SamplerConfig."""
    worker_id: str
    threads: int
    """torch threads while sampling: the sampler replicas' (bitwise-equal samples)."""
    train_threads: int
    commit_every: int
    reward: Any = None
    """The reward deployment's handle (looked up on first use)."""
    old_policy: Any = None
    """DiffusionNFT's EMA sampling policy (``grpo.nft_old_ema``): its weights are the
    published ones, so items are sampled with them swapped in; None: the policy's own."""
    items: int = 0
    samples: int = 0
    busy_s: float = 0.0

    def _reward_handle(self):
        if self.reward is None:
            from ray import serve

            from spotlight.actors import names

            self.reward = serve.get_deployment_handle("RewardScorer", app_name=names.SERVE_APP)
        return self.reward

    def sample_waiting(self, queue, version: int, previous=None) -> None:
        """Long-poll the queue for one rollout item of ``version`` and sample it: the work
        the worker does between looks at its mailbox (``protocol.wait_batch``'s
        ``meanwhile``), so it takes its share as soon as the rollout is submitted. A pipelined
        trainer holds ``previous``, ``(version - 1, copy)`` of the weights it published
        before, and samples that version's items (the pipelined rollout) with them."""
        pull = queue.pull.remote(self.worker_id, 1, [Kind.ROLLOUT], Pool.TRAINER, MAILBOX_POLL_S)
        for item in ray.get(pull):
            if item.weights_version == version:
                weights = None
            elif previous is not None and item.weights_version == previous[0]:
                weights = previous[1]
            else:  # not ours to sample: hand it back
                ray.get(queue.release.remote(self.worker_id))
                continue
            ray.get(queue.complete.remote(self.sample(queue, item, weights)))

    def sample(self, queue, item, swapped=None) -> ItemResult:
        """Sample ``item`` (from its checkpoint, if it has one) with the ``swapped`` weights
        in place (an ``OldPolicy``; None: the published ones, the old policy's when there is
        one) and score it."""
        from spotlight.flow.item_sampling import item_result, run_item, start_item
        from spotlight.flow.sampler import advance

        def commit(state) -> None:
            ray.get(queue.commit.remote(item.item_id, self.worker_id, state))

        t0 = time.perf_counter()
        torch.set_num_threads(self.threads)
        swapped = swapped if swapped is not None else self.old_policy
        weights = nullcontext() if swapped is None else swapped.applied(self.policy)
        try:
            trajs = start_item(item, self.policy.latent_shape, self.sampler)
            start_step = trajs[0].step
            with torch.no_grad(), weights:
                cond = self.policy.encode_prompts(list(item.prompts))

                def step(trajs):
                    advance(self.policy, trajs, 1, cond)
                    return trajs

                trajs, _ = run_item(trajs, step, self.commit_every, commit)
                images = self.policy.decode(torch.stack([tr.latents for tr in trajs]))
        finally:
            torch.set_num_threads(self.train_threads)
        rewards = self._reward_handle().remote(images, list(item.prompts)).result()
        busy = time.perf_counter() - t0
        self.items += 1
        self.samples += len(trajs)
        self.busy_s += busy
        return item_result(
            item,
            trajs,
            rewards,
            worker_id=self.worker_id,
            pool=Pool.TRAINER,
            busy_s=busy,
            resumed_from_step=start_step,
        )
