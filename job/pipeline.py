"""The Ray job's pipelined rollout (``schedule="pipelined"``): the next iteration's rollout is
submitted to the request queue while the trainer trains, on the weights it trains from, and
waited for when that iteration starts. Its decisions are :mod:`spotlight.training.pipeline`'s
and exploration's (``ExplorationStrategy.plan_pipelined``, ``pipelined_items``): this moves the
items and waits.

    update t starts:  submit rollout items (required)  +  optional candidates (explore items)
    update t ends:    update_ended(): keep the optional ones that finished, drop the rest
    iteration t + 1:  take(): wait for every required item
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
    """The candidates' work items the rollout waits for."""
    optional: list = field(default_factory=list)
    """The candidates' optional items (dropped when the update ends; none with a fixed
    budget)."""
    optional_done: dict | None = None
    """The optional items' results, once the update ended (None: not yet)."""
    rollout: list = field(default_factory=list)
    """The other prompts' work items, in batch order."""

    @property
    def items(self) -> list:
        return [*self.candidates, *self.rollout]


class Pipeline:
    """The next iteration's rollout of a pipelined run, between iterations."""

    def __init__(self, cfg, train_prompts: list[str], queue, explore):
        self.cfg, self.train_prompts, self.queue = cfg, train_prompts, queue
        self.explore = explore
        """The run's ``ExplorationStrategy``: which candidates are optional."""
        self.next: Submitted | None = None
        """The submitted rollout of the next iteration (None: none yet, or none left)."""
        self.resumed = None
        """A resumed run's checkpointed plan of its first rollout, submitted on first use."""

    def submit(self, exp) -> None:
        """Submit the rollout of ``exp`` on ``exp``'s weights version: its required candidates
        as rollout items (the rollout waits for them, the trainer may sample them), the
        optional ones as exploration items (served after every rollout item)."""
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
        candidates, optional = self.explore.pipelined_items(exp)
        self.next = Submitted(exp, candidates, optional, rollout=rollout)
        self.queue.start_items(self.next.items)
        if optional:
            self.queue.submit(optional)

    def update_ended(self) -> None:
        """The update the next rollout was sampled during ended: its optional candidates that
        finished are kept, the rest withdrawn."""
        if self.next is not None and self.next.optional and self.next.optional_done is None:
            ids = [i.item_id for i in self.next.optional]
            self.next.optional_done = self.queue.collect(ids)

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
        if sub.optional and sub.optional_done is None:  # submitted now: no update to wait for
            self.next = sub
            self.update_ended()
            self.next = None
        results = {**results, **(sub.optional_done or {})}
        rewards = [r for item in sub.rollout for r in results[item.item_id].rewards]
        trajs = [t for item in sub.rollout for t in results[item.item_id].trajectories]
        return sub.exploration, results, (rewards, trajs)

    def withdraw(self) -> None:
        """The run stopped early: the submitted next rollout is not needed."""
        if self.next is not None:
            ids = [i.item_id for i in (*self.next.items, *self.next.optional)]
            self.queue.call("drop", ids)
            self.next = None

    def state(self) -> dict[str, Any] | None:
        """The plan of the submitted next rollout, for the checkpoint (None: none)."""
        return None if self.next is None else self.next.exploration.to_state()
