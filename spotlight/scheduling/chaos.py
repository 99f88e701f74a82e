"""A seeded schedule of random faults over a run: which part fails, at which iteration, when.

The chaos bench (``benchmarks/chaos.py``) and its CI test draw a schedule here and carry it out
on a Ray run; this module only decides. A fault strikes at a *moment* of its iteration:

* ``sampling``: while rollout or exploration items are leased to the sampler replicas;
* ``mid_broadcast``: right after the trainer published the iteration's new weights, while the
  replicas fetch them;
* ``mid_commit``: right after the iteration's metrics row, while the driver writes its
  checkpoint;
* ``training``: after the batch was posted, while the trainer updates.

Each kind strikes only at moments where it has something to break (a sampler replica while it
holds an item, the reward replica while items are scored), listed in :data:`MOMENTS`.
"""

from __future__ import annotations

import enum
import random
from dataclasses import asdict, dataclass


class FaultKind(enum.StrEnum):
    """What the fault takes down."""

    QUEUE = "queue"
    """The request queue actor (Ray restarts it with no state)."""
    BROADCAST = "broadcast"
    """The weights broadcast actor (Ray restarts it with no versions)."""
    BANDIT = "bandit"
    """The bandit state actor (Ray restarts it; it reloads its file)."""
    SAMPLER_NOTICE = "sampler_notice"
    """A sampler replica's spot node, drained with a preemption notice, then removed."""
    SAMPLER_KILL = "sampler_kill"
    """A sampler replica's spot node, removed at once (no notice)."""
    REWARD = "reward"
    """The reward deployment's replica (Serve starts another)."""
    TRAINER = "trainer"
    """A Ray Train worker process (Ray Train restarts the workers from their checkpoint)."""
    DRIVER = "driver"
    """The driver process (SIGKILL; the run is resumed with ``--resume``)."""


class Moment(enum.StrEnum):
    """When, within its iteration, a fault strikes (module docstring)."""

    SAMPLING = "sampling"
    MID_BROADCAST = "mid_broadcast"
    MID_COMMIT = "mid_commit"
    TRAINING = "training"


MOMENTS: dict[FaultKind, tuple[Moment, ...]] = {
    FaultKind.QUEUE: (Moment.SAMPLING, Moment.MID_COMMIT, Moment.TRAINING),
    FaultKind.BROADCAST: (Moment.MID_BROADCAST, Moment.SAMPLING, Moment.MID_COMMIT),
    FaultKind.BANDIT: (Moment.SAMPLING, Moment.MID_COMMIT, Moment.TRAINING),
    FaultKind.SAMPLER_NOTICE: (Moment.SAMPLING,),
    FaultKind.SAMPLER_KILL: (Moment.SAMPLING,),
    FaultKind.REWARD: (Moment.SAMPLING,),
    FaultKind.TRAINER: (Moment.TRAINING, Moment.MID_BROADCAST, Moment.MID_COMMIT),
    FaultKind.DRIVER: (Moment.SAMPLING, Moment.MID_BROADCAST, Moment.MID_COMMIT, Moment.TRAINING),
}
"""The moments at which each kind has something to break."""

MAX_DELAY_S = 1.0
"""A fault strikes up to this many seconds (drawn) after its moment is seen."""


@dataclass(frozen=True)
class Fault:
    """One scheduled fault."""

    iteration: int
    """The iteration (0-based) during which it strikes."""
    kind: FaultKind
    moment: Moment
    delay_s: float
    """Seconds after the moment is seen."""

    def to_dict(self) -> dict:
        return {**asdict(self), "kind": str(self.kind), "moment": str(self.moment)}


def draw_schedule(
    seed: int,
    num_iterations: int,
    kinds: tuple[FaultKind, ...],
    min_each: int,
    num_faults: int,
    first_iteration: int = 1,
    max_each: dict[FaultKind, int] | None = None,
) -> list[Fault]:
    """``num_faults`` faults, every kind of ``kinds`` at least ``min_each`` times and at most
    ``max_each[kind]`` (where given), in random order, at distinct iterations of
    ``[first_iteration, num_iterations - 1)`` (the last one is left clean so every fault is
    recovered before the run ends); each at a moment drawn from its kind's :data:`MOMENTS`.
    The same seed gives the same schedule.

    Raises:
        ValueError: the faults do not fit (more than the iterations, fewer than the minimum).
    """
    slots = list(range(first_iteration, num_iterations - 1))
    if num_faults < min_each * len(kinds):
        raise ValueError(
            f"{num_faults} faults cannot give each of {len(kinds)} kinds {min_each} of them"
        )
    if num_faults > len(slots):
        raise ValueError(
            f"{num_faults} faults need as many iterations between {first_iteration} and the"
            f" last; the run has {len(slots)}"
        )
    rng = random.Random(seed)
    drawn = [k for k in kinds for _ in range(min_each)]
    for _ in range(num_faults - len(drawn)):
        room = [k for k in kinds if drawn.count(k) < (max_each or {}).get(k, num_faults)]
        if not room:
            raise ValueError(f"{num_faults} faults exceed the kinds' maximum {max_each}")
        drawn.append(rng.choice(room))
    rng.shuffle(drawn)
    at = sorted(rng.sample(slots, num_faults))
    return [
        Fault(it, kind, rng.choice(MOMENTS[kind]), round(rng.uniform(0.0, MAX_DELAY_S), 3))
        for it, kind in zip(at, drawn, strict=True)
    ]


def count_by_kind(faults: list[Fault]) -> dict[str, int]:
    """How many faults of each kind (kinds in :class:`FaultKind` order, absent ones left out)."""
    return {str(k): n for k in FaultKind if (n := sum(f.kind == k for f in faults))}
