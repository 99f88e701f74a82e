"""The pipelined schedule's decisions (``Config.schedule = "pipelined"``), written once for the
local runner and the Ray job: which weights a rollout samples with, what of it is sampled
beside exploration's candidates, how stale an update's samples may be and which weights are
DiffusionNFT's ``v_old`` for them, and what the local runner holds of a sampled rollout. No Ray,
no sampling.

While the trainer trains iteration ``t`` (weights ``v_t`` to ``v_t + 1``), iteration
``t + 1``'s rollout is sampled on ``v_t``: the trainer trains on samples one version old. The
first iteration's rollout has nothing to overlap and is sampled on the weights it trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spotlight.config import Config
from spotlight.explore.exploration import Exploration
from spotlight.flow.old_policy import OldPolicy
from spotlight.flow.sampler import Trajectory
from spotlight.scheduling.work_queue import ItemResult
from spotlight.training.rollout import RolloutPlan, plan_rollout

ROLLOUT_LAG = {"sync": 0, "pipelined": 1}
"""Per schedule, how many versions the samples an update trains on may lag its weights."""


def pipelined_plan(
    prompts: list[str],
    seeds: list[int],
    group: int,
    exp: Exploration,
    init_seeds: list[int] | None,
) -> RolloutPlan:
    """What a pipelined rollout samples beside the candidates ``exp`` plans: the other
    prompts' ``group`` seeds (a prompt with candidates trains on the ones its selection keeps,
    so its own seeds are not sampled)."""
    planned = {p for p, n in exp.plan.items() if n > 0}
    return plan_rollout(prompts, seeds, group, None, planned, init_seeds)


@dataclass
class PendingRollout:
    """The local runner's pipelined rollout, sampled before the iteration that trains on it."""

    exploration: Exploration
    """Its candidates (none without exploration), planned on its weights version."""
    plan: RolloutPlan
    """Its other samples (:func:`~spotlight.training.pipeline.pipelined_plan`)."""
    explored: dict[str, ItemResult]
    """The candidates' items, sampled and scored."""
    rolled: list[Trajectory]
    rolled_r: list[float]
    weights: OldPolicy
    """A copy of the weights that sampled it: DiffusionNFT's ``v_old`` once they are stale."""
    sample_s: float
    rate: float | None


def samples_lag(sample_versions: Sequence[int], version: int, max_lag: int) -> int:
    """How many versions an update's samples lag its weights ``version``: the same for all of
    them, between 0 and ``max_lag``.

    Raises:
        ValueError: the samples come from different versions, a newer one, or one more than
            ``max_lag`` versions old.
    """
    found = sorted(set(sample_versions))
    if not found:
        raise ValueError("an update without samples")
    if len(found) > 1:
        raise ValueError(f"an update's samples come from weights versions {found}, not one")
    lag = version - found[0]
    if not 0 <= lag <= max_lag:
        raise ValueError(
            f"samples of weights v{found[0]} for an update of v{version}: the schedule allows"
            f" a lag of 0 to {max_lag} versions"
        )
    return lag


def old_policy_for(
    cfg: Config,
    lag: int,
    current: Any,
    sampled_with: Any,
) -> Any:
    """DiffusionNFT's old policy for an update on samples ``lag`` versions old: ``current``
    (the run's own: the EMA sampling policy, or None for the weights the update starts with)
    for fresh samples, else ``sampled_with``, the copy of the weights that sampled them. None
    for the other objectives (Flow-GRPO's ratio is against the log-probs recorded when
    sampling)."""
    if cfg.grpo.loss != "nft":
        return current
    if lag == 0:
        return current
    if sampled_with is None:
        raise ValueError(f"samples {lag} version(s) old and no copy of the weights that drew them")
    return sampled_with
