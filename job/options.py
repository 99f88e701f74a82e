"""Where and how wide the Ray job runs: :class:`RayOptions` (the algorithm is in ``Config``).

The command line's Ray flags (``spotlight train --samplers ...``) take their defaults from
these fields; ``validate`` refuses a bad combination before Ray starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from spotlight.scheduling.costs import PriceTable

OPTIONS_FILE = "ray_options.json"
"""The run folder's record of the Ray options it last ran with (``config.json`` holds the
algorithm's settings, which a resume cannot change; these it can, and says so)."""


@dataclass
class RayOptions:
    """Where and how wide the job runs (the algorithm is in :class:`Config`)."""

    address: str | None = None
    """Ray cluster to join; None: RAY_ADDRESS, else start a local Ray."""
    num_samplers: int = 2
    """Sampler replicas (the autoscaler's upper bound; at least one is kept)."""
    num_train_workers: int = 1
    """Ray Train workers (data parallel)."""
    threads_per_worker: int = 1
    """torch threads per sampler / reward replica (CPU)."""
    trainer_threads: int = 2
    """torch threads per train worker (CPU). Locally sampling and training alternate, so the
    trainer may use the cores the replicas use while they wait."""
    sampler_idle_priority: bool = True
    """On a CPU device, run the sampler and reward replicas' work at idle priority (Linux
    ``SCHED_IDLE``): the trainer keeps its cores while spot exploration uses what is left, as
    on separate GPUs. (Ray starts every worker at nice 15, trainer included, so a nice value
    alone would not do it.)"""
    device: str = "cpu"
    prices: PriceTable = field(default_factory=PriceTable)
    wandb: bool = True
    """Log to W&B (offline unless WANDB_MODE / WANDB_API_KEY say otherwise)."""
    item_timeout_s: float = 1800.0
    """Give up when an iteration's items are not all done after this long."""
    progress_every_s: float = 10.0
    """Status line interval while waiting."""
    keep_cluster_state: bool = False
    """Leave the Serve app and detached actors running at the end (default: clean up)."""
    # -- Preemptions (see deployments/sampler.py, spotlight/scheduling/work_queue.py) --
    lease_s: float = 30.0
    """A pulled item's lease; heartbeats (every 2 s, from a thread of their own) and commits
    extend it. A replica that dies without a word holds its items this long."""
    commit_every: int = 4
    """Replicas commit an item's in-flight state every this many steps (0: on a notice only)."""
    spill: str = "after_wait"
    """When on-demand sampler replicas take rollout items: never, after_wait, always."""
    spill_wait_s: float = 30.0
    """For ``after_wait``: how long a rollout item waits for spot capacity first."""
    notice_sources: tuple[str, ...] = ()
    """Clouds whose preemption notices the replicas poll ('aws', 'gcp'); Ray drains always."""
    spot_trace: str | None = None
    """Replay this capacity trace on a local multi-node Ray (job/local_cluster.py)."""
    trace_time_scale: float = 600.0
    """Replay the trace this many times faster than real time."""
    trace_notice_s: float = 5.0
    """Wall seconds between a replayed preemption's notice and the node's removal."""
    trace_hard_share: float = 0.0
    """Share of replayed preemptions with no notice (the node is killed)."""
    trace_start_s: float | None = None
    """Trace time the replay starts at (default: where the trace first has capacity)."""
    trace_seed: int = 0
    """Which nodes the replay preempts."""
    sp_degree: int = 1
    """SP group size: a sample is split over this many GPUs (Ulysses SP above 1)."""
    sp_workers: int | None = None
    """GPUs (locally: worker processes) per sampler replica, grouped into SP groups of
    ``sp_degree`` that share its items (e.g. all 8 GPUs of a node at SP 4: two groups, and
    after a loss 4 + 3 for Qwen-Image's 24 heads). Default: ``sp_degree`` (one group)."""

    trainer_samples: bool = False
    """The Ray Train workers sample the rollout's items while they wait for it (their GPUs idle
    then; job/trainer_sampling.py). On a GPU cluster the rollout gets the trainer's GPUs
    too, at no extra cost: docs/simulator.md measures it on spot traces. Off by default: on one
    CPU machine the trainer's cores are the replicas' cores."""
    merge_lora: bool = False
    """Sampler replicas sample with the policy's LoRA adapters merged into its base weights,
    rounded once to their dtype (bf16 for Qwen-Image; spotlight.policies.lora_merge): faster,
    and the sampled log-probs are no longer the trainer's, so only for an update that does not
    read them (``grpo.loss`` 'nft' or 'awm'): :func:`check_merge_lora`."""
    reward_gpus: float | None = None
    """GPUs of the reward deployment. None: one for a model reward (``MODEL_REWARDS``: an OCR
    model, GenEval's detector and CLIP) on a CUDA device, else none."""

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (tuples as lists), as ``OPTIONS_FILE`` holds them."""
        return json_values(dataclasses.asdict(self))

    def changes_from(self, saved: dict[str, Any]) -> list[str]:
        """``name: saved -> now`` for every option that differs from ``saved`` (a
        ``to_dict`` of an earlier start of the run); options it lacks are left out."""
        now = self.to_dict()
        return [
            f"{k}: {saved[k]!r} -> {v!r}" for k, v in now.items() if k in saved and saved[k] != v
        ]

    @property
    def workers_per_replica(self) -> int:
        return self.sp_workers if self.sp_workers is not None else self.sp_degree

    def scorer_gpus(self, reward: str) -> float:
        """GPUs the reward deployment asks for (``reward_gpus``, resolved)."""
        if self.reward_gpus is not None:
            return self.reward_gpus
        from spotlight.rewards import MODEL_REWARDS

        return 1.0 if self.device.startswith("cuda") and reward in MODEL_REWARDS else 0.0

    def spill_policy(self):
        from spotlight.scheduling.work_queue import SpillPolicy

        return SpillPolicy(self.spill, self.spill_wait_s)

    def validate(self) -> None:
        counts = {
            "samplers": self.num_samplers,
            "train workers": self.num_train_workers,
            "threads": self.threads_per_worker,
            "trainer threads": self.trainer_threads,
        }
        counts["sp degree"] = self.sp_degree
        bad = [f"{k} ({v})" for k, v in counts.items() if v < 1]
        if bad:
            raise ValueError(f"must be >= 1: {', '.join(bad)}")
        if self.workers_per_replica < self.sp_degree:
            raise ValueError(
                f"sp workers ({self.sp_workers}) must be >= the sp degree ({self.sp_degree}):"
                " a replica needs the GPUs of at least one SP group"
            )
        if self.reward_gpus is not None and self.reward_gpus < 0:
            raise ValueError(f"reward gpus must be >= 0, got {self.reward_gpus}")
        if self.lease_s <= 0 or self.commit_every < 0 or self.trace_time_scale <= 0:
            raise ValueError("need lease_s > 0, commit_every >= 0 and trace_time_scale > 0")
        self.spill_policy()
        from spotlight.scheduling.notices import NoticeWatcher

        NoticeWatcher.for_clouds(list(self.notice_sources))  # refuses unknown clouds
        if self.spot_trace is not None:
            from spotlight.scheduling.traces import load_trace

            load_trace(self.spot_trace)  # a missing or malformed trace fails before Ray starts


MERGE_LORA_LOSSES = ("nft", "awm")
"""The updates that never read the sampler's log-probs: their samplers may merge the LoRA."""


def check_merge_lora(opts: RayOptions, loss: str) -> None:
    """Refuse ``merge_lora`` for an update that reads the sampler's log-probs (Flow-GRPO)."""
    if opts.merge_lora and loss not in MERGE_LORA_LOSSES:
        raise ValueError(
            f"--merge-lora: grpo.loss {loss!r} needs the sampler's own log-probs (Flow-GRPO's"
            " ratio), which merged, rounded weights do not give; merged sampling is for"
            f" grpo.loss {' or '.join(map(repr, MERGE_LORA_LOSSES))}"
        )


def json_values(value: Any) -> Any:
    """``value`` with its tuples as lists (what JSON gives back), recursively."""
    if isinstance(value, dict):
        return {k: json_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_values(v) for v in value]
    return value


def local_resources(opts: RayOptions) -> dict[str, float]:
    """Virtual resources of the embedded local Ray (the roles of cluster.yaml's node types)."""
    from spotlight.scheduling import resources

    return {
        resources.RESOURCE_SPOT: 1.0,
        resources.RESOURCE_ON_DEMAND: 1.0,
        resources.RESOURCE_CONTROL: 1.0,
        resources.RESOURCE_SAMPLER: float(opts.num_samplers * opts.workers_per_replica),
        resources.RESOURCE_TRAINER: float(opts.num_train_workers),
        resources.RESOURCE_REWARD: max(1.0, opts.reward_gpus or 0.0),
    }
