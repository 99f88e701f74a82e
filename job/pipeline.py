"""The Ray job's pipelined rollout (``schedule="pipelined"``): the next iteration's rollout is
submitted to the request queue while the trainer trains, on the weights it trains from, and
waited for when that iteration starts. Its decisions are :mod:`spotlight.training.pipeline`'s
and exploration's (``ExplorationStrategy.plan_pipelined``): this moves the items and waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spotlight.scheduling.work_queue import Kind
from spotlight.training.loop import iteration_batch
from spotlight.training.pipeline import pipelined_plan
from spotlight.training.rollout import work_items


@dataclass
class Submitted:
    """A pipelined rollout in the queue."""

    exploration: Any
    """Its candidates' plan (``spotlight.explore.exploration.Exploration``) and weights version."""
    candidates: list = field(default_factory=list)
    """The candidates' work items."""
    rollout: list = field(default_factory=list)
    """The other prompts' work items, in batch order."""

    @property
    def items(self) -> list:
        return [*self.candidates, *self.rollout]


class Pipeline:
    """The next iteration's rollout of a pipelined run, between iterations."""

    def __init__(self, cfg, train_prompts: list[str], queue):
        self.cfg, self.train_prompts, self.queue = cfg, train_prompts, queue
        self.next: Submitted | None = None
        """The submitted rollout of the next iteration (None: none yet, or none left)."""
        self.resumed = None
        """A resumed run's checkpointed plan of its first rollout, submitted on first use."""

    def submit(self, exp) -> None:
        """Submit the rollout of ``exp`` (its candidates as rollout items: the rollout waits
        for them, the trainer may sample them) on ``exp``'s weights version."""
        cfg = self.cfg
        prompts, seeds, init = iteration_batch(cfg, self.train_prompts, exp.iteration, True)
        plan = pipelined_plan(prompts, seeds, cfg.grpo.group_size, exp, init)
        rollout = work_items(
            plan.to_sample,
            f"r{exp.iteration}-v{exp.weights_version}",
            Kind.ROLLOUT,
            exp.iteration,
            exp.weights_version,
            cfg.sampler.batch_size,
            plan.to_sample_init,
        )
        candidates = exp.work_items(cfg.seed, cfg.sampler.batch_size, Kind.ROLLOUT)
        self.next = Submitted(exp, candidates, rollout)
        self.queue.start_items(self.next.items)

    def take(self, it: int, plan_now) -> tuple[Any, dict[str, Any], tuple[list, list]]:
        """Wait for iteration ``it``'s rollout (submitted now when it is not yet: the first
        iteration's from ``plan_now()``, a resumed run's from its checkpoint). Returns its
        exploration, every item's result, and the other prompts' rewards and trajectories in
        batch order (as a pair)."""
        if self.next is None:  # the first iteration's, or a resumed run's first
            self.submit(self.resumed if self.resumed is not None else plan_now())
            self.resumed = None
        if self.next.exploration.iteration != it:
            raise RuntimeError(
                f"iteration {it}: the submitted rollout is iteration"
                f" {self.next.exploration.iteration}'s"
            )
        sub, self.next = self.next, None
        results = self.queue.finish_items(sub.items, f"iteration {it + 1} rollout")
        rewards = [r for item in sub.rollout for r in results[item.item_id].rewards]
        trajs = [t for item in sub.rollout for t in results[item.item_id].trajectories]
        return sub.exploration, results, (rewards, trajs)

    def withdraw(self) -> None:
        """The run stopped early: the submitted next rollout is not needed."""
        if self.next is not None:
            self.queue.call("drop", [i.item_id for i in self.next.items])
            self.next = None

    def state(self) -> dict[str, Any] | None:
        """The plan of the submitted next rollout, for the checkpoint (None: none)."""
        return None if self.next is None else self.next.exploration.to_state()
