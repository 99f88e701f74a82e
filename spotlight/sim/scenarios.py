"""The simulator's scenarios. The paper scenarios are built, not typed: from the recipes (image
size, steps sampled and passes trained, prompts x group, sampler batch, SP degree, explored
seeds) and from ``cluster.yaml`` (GPUs a node, the on-demand fallback), with the job's flags of the
documented paper commands (``PAPER_RUNS``). docs/cluster.md's commands are tested against
``PAPER_RUNS`` and cluster.yaml's node types against the runs' demand, so the figures the
simulator gives are those of the job a user submits. No Ray, no torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from spotlight.config import Config, trained_step_count
from spotlight.scheduling import resources
from spotlight.scheduling.capacity import NodeType, job_roles, node_types, shortfalls
from spotlight.sim.sim_model import Overheads, Scenario

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"
"""The repository's cluster launcher config."""

PIXELS_PER_TOKEN = 16
"""Qwen-Image's VAE downsamples by 8 and its transformer patchifies 2 x 2: one image token per
16 x 16 pixels (512 x 512: 1,024 tokens; 1280 x 1280: 6,400)."""

SP_EFFICIENCY = {1: 1.0, 2: 0.92, 3: 0.88, 4: 0.85, 6: 0.78, 8: 0.72}
"""Throughput per GPU of a Ulysses SP group of k relative to k=1 (modelled: two all-to-alls a
layer over NVLink; not measured on GPUs)."""


@dataclass(frozen=True)
class PaperRun:
    """One paper run as submitted: the recipe and the job's flags (docs/cluster.md)."""

    recipe: str
    samplers: int
    """``--samplers``: spot sampler replicas."""
    workers_per_replica: int
    """``--sp-workers`` (GPUs a replica; 1 without the flag)."""
    train_workers: int
    """``--train-workers``: trainer GPUs."""

    def flags(self) -> dict[str, int]:
        """The job's flags, as the command line spells them."""
        out = {"--samplers": self.samplers, "--train-workers": self.train_workers}
        if self.workers_per_replica != 1:
            out["--sp-workers"] = self.workers_per_replica
        return out


PAPER_RUNS: dict[str, PaperRun] = {
    "paper-512": PaperRun(
        "qwen-image-ocr-512", samplers=32, workers_per_replica=1, train_workers=16
    ),
    "paper-1280": PaperRun(
        "qwen-image-ocr-1280", samplers=4, workers_per_replica=8, train_workers=16
    ),
}
"""Both sizes use 16 on-demand trainer GPUs (two trainer nodes) and 32 spot sampler GPUs (four
8-GPU nodes): at 512 one GPU a replica, at 1280 one node a replica, two SP groups of 4 in it.
GenEval's recipes at each size have the same settings as OCR's and run with the same flags."""


def trained_passes(cfg: Config) -> int:
    """Forward + backward passes one sample costs the update (every inner epoch): Flow-GRPO
    replays its SDE window's trained steps with the sampler's classifier-free guidance (two
    passes a step: conditional and unconditional, spotlight/flow/update.py); DiffusionNFT and
    AWM train their noised draws of the final sample without guidance (DiffusionNFT's no-grad
    forward of the old policy not counted)."""
    g = cfg.grpo
    if g.loss == "nft":
        per_epoch = g.nft_draws
    elif g.loss == "awm":
        per_epoch = g.awm_draws
    else:
        steps = trained_step_count(g.timestep_fraction, cfg.sampler.sde_window)
        per_epoch = steps * (1 if cfg.sampler.guidance_scale == 1.0 else 2)
    return per_epoch * g.num_inner_epochs


def _sampler_gpus_a_node(types: list[NodeType], market: str) -> list[tuple[NodeType, int]]:
    """Node types that offer ``sampler_gpu`` in ``market`` ('spot' or 'on_demand'), each with
    its ``sampler_gpu`` count."""
    return [
        (t, int(t.resources[resources.RESOURCE_SAMPLER]))
        for t in types
        if t.resources.get(resources.RESOURCE_SAMPLER, 0) > 0 and t.resources.get(market, 0) > 0
    ]


def paper_scenario(name: str, cluster: Mapping[str, Any] | None = None) -> Scenario:
    """Scenario ``name`` of ``PAPER_RUNS``, from its recipe and ``cluster`` (the parsed cluster
    launcher config; default: the repository's ``cluster.yaml``).

    Raises:
        ValueError: the cluster's node types cannot hold the run, or its spot sampler types
            differ in GPUs a node.
    """
    from spotlight.recipes import RAY_HINTS, get_recipe

    run = PAPER_RUNS[name]
    cfg = get_recipe(run.recipe)
    types = node_types(cluster if cluster is not None else _cluster_yaml())
    sp_degree = RAY_HINTS.get(run.recipe, {}).get("sp_degree", 1)
    roles = job_roles(run.train_workers, run.samplers, run.workers_per_replica, 0.0)
    missing = shortfalls(types, roles)
    if missing:
        raise ValueError(f"scenario {name}: the cluster cannot hold its run: {'; '.join(missing)}")
    spot = {gpus for _, gpus in _sampler_gpus_a_node(types, resources.RESOURCE_SPOT)}
    if len(spot) != 1:
        raise ValueError(
            f"scenario {name}: the spot sampler node types offer {sorted(spot)} sampler GPUs a"
            " node; the simulator's traces count nodes of one size"
        )
    fallback = sum(
        gpus * t.max_nodes for t, gpus in _sampler_gpus_a_node(types, resources.RESOURCE_ON_DEMAND)
    )
    size = int(cfg.policy.options["height"])
    return Scenario(
        name=name,
        image_tokens=(size // PIXELS_PER_TOKEN)
        * (int(cfg.policy.options["width"]) // PIXELS_PER_TOKEN),
        trainer_gpus=run.train_workers,
        sampler_gpus=run.samplers * run.workers_per_replica,
        fallback_gpus=fallback,
        prompts_per_iteration=cfg.num_prompts_per_iteration,
        group_size=cfg.grpo.group_size,
        num_steps=cfg.sampler.num_steps,
        train_step_fraction=trained_passes(cfg) / cfg.sampler.num_steps,
        batch_size=cfg.sampler.batch_size,
        sp_degree=sp_degree,
        gpus_per_node=spot.pop(),
        sp_efficiency=SP_EFFICIENCY if sp_degree > 1 else {1: 1.0},
        explore_candidates=cfg.exploration.max_candidates,
    )


@cache
def _cluster_yaml() -> dict[str, Any]:
    import yaml

    if not CLUSTER_YAML.is_file():
        raise FileNotFoundError(
            f"the paper scenarios are built from the repository's cluster.yaml, not found at"
            f" {CLUSTER_YAML}: run the simulator from a checkout of the repository"
        )
    return yaml.safe_load(CLUSTER_YAML.read_text())


SMALL = Scenario(
    name="small",
    image_tokens=1024,
    trainer_gpus=2,
    sampler_gpus=4,
    fallback_gpus=2,
    prompts_per_iteration=4,
    group_size=4,
    num_steps=4,
    train_step_fraction=0.5,
    batch_size=2,
    sp_degree=2,
    sp_efficiency={1: 1.0, 2: 0.9},
    explore_candidates=8,
    critical_candidates=8,
    overheads=Overheads(replica_start_s=10.0, notice_s=5.0, lease_s=5.0),
    max_hours=5.0,
)
"""A seconds-long scenario for tests and trying flags (round numbers, not a real cluster)."""


class _Scenarios(Mapping[str, Scenario]):
    """``SCENARIOS``: the names are known at once, a paper scenario is built on first use."""

    def __iter__(self) -> Iterator[str]:
        return iter([*PAPER_RUNS, SMALL.name])

    def __len__(self) -> int:
        return len(PAPER_RUNS) + 1

    def __getitem__(self, name: str) -> Scenario:
        if name == SMALL.name:
            return SMALL
        if name not in PAPER_RUNS:
            raise KeyError(name)
        return _paper(name)


@cache
def _paper(name: str) -> Scenario:
    return paper_scenario(name)


SCENARIOS: Mapping[str, Scenario] = _Scenarios()
"""Every scenario by name: ``paper-512``, ``paper-1280`` (built as above) and ``small``."""
