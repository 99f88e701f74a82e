"""Can a cluster ever run a job? What the job asks for, against what its node types can offer.

The Ray job places each role on capacity through a custom resource (:mod:`.resources`): a
trainer worker takes one ``trainer_gpu``, a sampler replica ``sampler_gpu`` for each of its
GPU workers, the model reward ``reward_gpu``. A request that no node type can ever satisfy is
not an error in Ray: it stays pending, the autoscaler logs that it cannot be scheduled, and
the job would wait on its items until they time out. So before anything is deployed the job
compares its demand with the most its node types could provide once the autoscaler has
launched every node it may (``max_workers`` of each type, ``cluster.yaml``), and stops with one
message that names the shortfall. During the run :func:`lost_roles` asks the same of the live
nodes: a cluster that lost the node of an on-demand role and has no autoscaler to replace it
would otherwise wait on its items until they time out.

The check counts whole units per node: two replicas of 4 GPU workers fit a node that offers 8
``sampler_gpu``, three do not. It looks at the custom resources only: Ray's AWS provider fills in
CPU and GPU counts from the instance type, and the cluster config keeps the role's custom
resource equal to the node's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from spotlight.scheduling import resources


@dataclass(frozen=True)
class NodeType:
    """One node type of the cluster config: what one node offers and how many there can be."""

    name: str
    resources: Mapping[str, float]
    max_nodes: int


@dataclass(frozen=True)
class Role:
    """``count`` units of work, each needing ``per_unit`` resources on one node."""

    name: str
    count: int
    per_unit: Mapping[str, float]
    flag: str
    """The command line's words that set ``count`` (named in the message)."""


def node_types(cluster_config: Mapping, source: str = "the cluster config") -> list[NodeType]:
    """The node types of a Ray cluster launcher config (``cluster.yaml`` as a dict, or the
    bootstrap config the head runs with): the head type once, every other type up to its
    ``max_workers`` (bounded by the cluster's ``max_workers``).

    Raises:
        ValueError: naming ``source`` and what in it is malformed (a section that is not a
            mapping, a count that is not a whole number >= 0, a resource that is not a finite
            number >= 0).
    """
    if not isinstance(cluster_config, Mapping):
        raise ValueError(f"{source}: not a mapping of settings")
    types = cluster_config.get("available_node_types") or {}
    if not isinstance(types, Mapping):
        raise ValueError(f"{source}: available_node_types is not a mapping of node types")
    head = cluster_config.get("head_node_type")
    cap = cluster_config.get("max_workers")
    if cap is not None:
        cap = _count(cap, f"{source}: max_workers")
    out = []
    for name, spec in types.items():
        where = f"{source}: node type {name!r}"
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where} is not a mapping")
        most = _count(spec.get("max_workers", 0), f"{where}: max_workers")
        if cap is not None:
            most = min(most, cap)
        if name == head:
            most += 1
        res = spec.get("resources") or {}
        if not isinstance(res, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf
            for v in res.values()
        ):
            raise ValueError(f"{where}: resources must map names to numbers >= 0, got {res!r}")
        out.append(NodeType(str(name), dict(res), most))
    return out


def _count(value, what: str) -> int:
    """``value`` as a count (a whole number >= 0), else a ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number >= 0, got {value!r}")
    return value


def job_roles(
    train_workers: int, samplers: int, workers_per_replica: int, reward_gpus: float
) -> list[Role]:
    """What the Ray job asks for, in the units it asks for them (``job/launch.py``,
    ``deployments/sampler.py``, ``deployments/reward.py``). All ``samplers`` replicas count:
    Serve starts the deployment with that many (``initial_replicas``) and waits for them."""
    roles = [
        Role("trainer worker", train_workers, {resources.RESOURCE_TRAINER: 1.0}, "--train-workers"),
        Role(
            "sampler replica",
            samplers,
            {resources.RESOURCE_SAMPLER: float(workers_per_replica)},
            "--samplers, each with --sp-workers or --sp-degree GPUs",
        ),
    ]
    if reward_gpus > 0:
        roles.append(
            Role(
                "model reward", 1, {resources.RESOURCE_REWARD: float(reward_gpus)}, "--reward-gpus"
            )
        )
    return roles


def units_per_node(offer: Mapping[str, float], per_unit: Mapping[str, float]) -> int:
    """How many units needing ``per_unit`` fit on one node offering ``offer``."""
    fits = []
    for key, need in per_unit.items():
        if need <= 0:
            continue
        fits.append(math.floor(offer.get(key, 0.0) / need + 1e-9))
    return min(fits) if fits else 0


def most_units(types: list[NodeType], per_unit: Mapping[str, float]) -> int:
    """Units of a role the node types can hold at most, every node type at its maximum."""
    return sum(units_per_node(t.resources, per_unit) * t.max_nodes for t in types)


def shortfalls(
    types: list[NodeType], roles: list[Role], holder: str = "the node types"
) -> list[str]:
    """One sentence per role that the node types can never hold (empty: the job fits);
    ``holder`` names the node types in it.

    Roles ask for different custom resources, so they do not compete with each other here."""
    out = []
    for role in roles:
        most = most_units(types, role.per_unit)
        if most >= role.count:
            continue
        need = ", ".join(f"{v:g} '{k}'" for k, v in role.per_unit.items())
        offers = [
            f"{t.name}: {units_per_node(t.resources, role.per_unit)} per node x {t.max_nodes}"
            for t in types
            if any(t.resources.get(k, 0) > 0 for k in role.per_unit)
        ]
        where = "; ".join(offers) if offers else "no node type offers it"
        out.append(
            f"{role.count} {role.name}{'s' if role.count != 1 else ''} ({role.flag})"
            f" {'needs' if role.count == 1 else 'need'} {need} each, and {holder} can"
            f" hold at most {most} ({where})"
        )
    return out


def lost_roles(live: list[NodeType], roles: list[Role]) -> list[str]:
    """Mid-run: one sentence per on-demand role that the live nodes no longer hold (empty:
    nothing is lost). Sampler replicas are left out: spot nodes go and come back, and while
    they are gone the queue spills their items to the on-demand replica."""
    kept = [r for r in roles if resources.RESOURCE_SAMPLER not in r.per_unit]
    return shortfalls(live, kept, holder="the live nodes")
