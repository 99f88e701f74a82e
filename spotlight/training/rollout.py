"""An iteration's rollout as data: which seeds to sample, in which items, and the results back
in prompt order, and the rate it measured. Pure (no Ray, no torch): the Ray controller runs it,
the tests check it.

The batch of an iteration is ``B`` prompts x ``G`` seeds
(``spotlight.training.loop.iteration_batch``). Exploration may have chosen a prompt's ``G`` seeds
already (``chosen``); the critical path has even sampled them on these weights (``reused``: their
rewards and trajectories are taken as they are). What is left is sampled in work items of
``batch_size`` samples, and the rewards and trajectories of the rollout are put back in the batch's
order: prompt by prompt, ``G`` each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spotlight.scheduling.work_queue import Pool, WorkItem


@dataclass(frozen=True)
class RolloutPlan:
    """The samples of one rollout."""

    prompts: tuple[str, ...]
    """The batch's prompts, one per group, in batch order."""
    seeds: tuple[int, ...]
    """``G`` seeds per prompt, in the same order (exploration's choices in place)."""
    group: int
    reused: frozenset[str]
    """Prompts whose samples exist already (sampled on these weights): not sampled again."""
    init_seeds: tuple[int, ...] | None = None
    """One initial-noise seed per prompt when a group shares it (``sampler.group_init_noise``)."""

    def group_seeds(self, b: int) -> tuple[int, ...]:
        return self.seeds[b * self.group : (b + 1) * self.group]

    @property
    def to_sample(self) -> list[tuple[str, int]]:
        """(prompt, seed) of every sample to draw, prompt by prompt (the reused left out)."""
        return [
            (p, s)
            for b, p in enumerate(self.prompts)
            if p not in self.reused
            for s in self.group_seeds(b)
        ]

    @property
    def to_sample_init(self) -> list[int] | None:
        """The init seed of every sample of :attr:`to_sample` (None: no shared noise)."""
        if self.init_seeds is None:
            return None
        return [
            i
            for p, i in zip(self.prompts, self.init_seeds, strict=True)
            if p not in self.reused
            for _ in range(self.group)
        ]

    def assemble(
        self,
        sampled: list[Any],
        reused: dict[str, list[Any]],
    ) -> list[Any]:
        """Per-sample values (rewards, trajectories) in batch order: ``sampled`` in the order of
        :attr:`to_sample`, ``reused[prompt]`` for the reused prompts.

        Raises:
            ValueError: ``sampled`` is not one value per sample to draw, or a reused prompt has
                not ``G`` values.
        """
        if len(sampled) != len(self.to_sample):
            raise ValueError(f"{len(sampled)} sampled values for {len(self.to_sample)} samples")
        out, k = [], 0
        for p in self.prompts:
            if p in self.reused:
                values = reused[p]
                if len(values) != self.group:
                    raise ValueError(f"{len(values)} reused values for {p!r}, not {self.group}")
                out.extend(values)
            else:
                out.extend(sampled[k : k + self.group])
                k += self.group
        return out


def plan_rollout(
    prompts: list[str],
    seeds: list[int],
    group: int,
    chosen: dict[str, list[int]] | None = None,
    reused: set[str] | frozenset[str] = frozenset(),
    init_seeds: list[int] | None = None,
) -> RolloutPlan:
    """The rollout of a batch (``prompts`` and ``seeds`` flat, ``group`` per prompt) with
    exploration's ``chosen`` seeds in place of the random ones and the ``reused`` prompts
    (sampled already) left out of what is sampled. ``init_seeds`` (flat, as
    ``iteration_batch`` gives them: one per group, repeated) when groups share their noise.

    Raises:
        ValueError: the batch is not whole groups of one prompt each, a chosen seed list is not
            ``group`` long, or a reused prompt is not in the batch.
    """
    if group < 1 or len(prompts) != len(seeds) or len(prompts) % group:
        raise ValueError(f"{len(prompts)} prompts and {len(seeds)} seeds: not groups of {group}")
    unique = tuple(prompts[::group])
    if any(prompts[b * group + j] != p for b, p in enumerate(unique) for j in range(group)):
        raise ValueError("each group of the batch must be one prompt")
    flat = list(seeds)
    for b, p in enumerate(unique):
        if p in (chosen or {}):
            if len(chosen[p]) != group:
                raise ValueError(f"{len(chosen[p])} chosen seeds for {p!r}, not {group}")
            flat[b * group : (b + 1) * group] = chosen[p]
    if not set(reused) <= set(unique):
        raise ValueError(f"reused prompts not in the batch: {sorted(set(reused) - set(unique))}")
    per_group = None
    if init_seeds is not None:
        if len(init_seeds) != len(prompts):
            raise ValueError(f"{len(init_seeds)} init seeds for {len(prompts)} samples")
        per_group = tuple(init_seeds[::group])
    return RolloutPlan(unique, tuple(flat), group, frozenset(reused), per_group)


def chunks(
    samples: list[tuple[str, int]], batch_size: int, init_seeds: list[int] | None = None
) -> list[tuple[tuple, tuple, tuple | None]]:
    """``samples`` cut into work items of ``batch_size``: (prompts, seeds, init seeds or None)
    per item, in order (the last may be shorter)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if init_seeds is not None and len(init_seeds) != len(samples):
        raise ValueError(f"{len(init_seeds)} init seeds for {len(samples)} samples")
    return [
        (
            tuple(p for p, _ in samples[lo : lo + batch_size]),
            tuple(s for _, s in samples[lo : lo + batch_size]),
            tuple(init_seeds[lo : lo + batch_size]) if init_seeds is not None else None,
        )
        for lo in range(0, len(samples), batch_size)
    ]


def work_items(
    samples: list[tuple[str, int]],
    prefix: str,
    kind: str,
    iteration: int,
    version: int,
    batch_size: int,
    init_seeds: list[int] | None = None,
) -> list[WorkItem]:
    """``samples`` (prompt, seed) as work items of ``batch_size`` on weights ``version``, with
    ids ``<prefix>-<k>`` (deterministic: a restarted driver finds the finished ones)."""
    return [
        WorkItem(f"{prefix}-{k}", kind, iteration, version, ps, ss, init_seeds=ii)
        for k, (ps, ss, ii) in enumerate(chunks(samples, batch_size, init_seeds))
    ]


def samplers_rate(
    results, samples: int, sample_s: float, trainer_samples: bool, workers_by_pool: dict
) -> float | None:
    """The sampler replicas' throughput (samples/s) in a rollout of ``samples`` that took
    ``sample_s``: what can explore during the update. With the trainer sampling too
    (``trainer_samples``), the rollout's own rate would count the trainer's GPUs, so the
    replicas' per-item rate times their number (``workers_by_pool``, the queue's) is used.
    None: no estimate from this rollout (keep the last one)."""
    if not samples:
        return None
    if not trainer_samples:
        return samples / max(1e-6, sample_s)
    mine = [r for r in results if r.pool != Pool.TRAINER]
    busy = sum(r.busy_s for r in mine)
    replicas = sum(n for p, n in workers_by_pool.items() if p != Pool.TRAINER)
    if busy <= 0 or replicas == 0:
        return None  # the trainer took every item: keep the last estimate
    return sum(len(r.rewards) for r in mine) / busy * replicas
