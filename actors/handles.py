"""Get or create the detached actors, placed on the head's on-demand capacity."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import ray

from spotlight.actors.bandit_state import BanditState
from spotlight.actors.names import (
    BANDIT_STATE,
    NAMESPACE,
    REQUEST_QUEUE,
    WEIGHT_BROADCAST,
)
from spotlight.actors.request_queue import RequestQueue
from spotlight.actors.weight_broadcast import WeightBroadcast
from spotlight.scheduling.resources import RESOURCE_CONTROL


@dataclass
class Actors:
    queue: Any
    broadcast: Any
    bandit: Any


def _placement() -> dict:
    """On the head (the ``control`` resource) when the cluster has one, else anywhere."""
    if ray.cluster_resources().get(RESOURCE_CONTROL, 0) > 0:
        return {"resources": {RESOURCE_CONTROL: 0.001}}
    return {}


def ensure_actors(
    bandit_path: str | None = None, lease_s: float = 30.0, keep_versions: int = 3
) -> Actors:
    """The run's detached actors: existing ones (a restarted driver) or new ones."""
    common = {"namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True}
    place = _placement()
    return Actors(
        queue=RequestQueue.options(name=REQUEST_QUEUE, **common, **place).remote(lease_s),
        broadcast=WeightBroadcast.options(name=WEIGHT_BROADCAST, **common, **place).remote(
            keep_versions
        ),
        bandit=BanditState.options(name=BANDIT_STATE, **common, **place).remote(bandit_path),
    )


def get_actors() -> Actors:
    """Look up the running actors by name (replicas and trainer workers)."""
    return Actors(
        queue=ray.get_actor(REQUEST_QUEUE, namespace=NAMESPACE),
        broadcast=ray.get_actor(WEIGHT_BROADCAST, namespace=NAMESPACE),
        bandit=ray.get_actor(BANDIT_STATE, namespace=NAMESPACE),
    )


def kill_actors() -> None:
    """End the detached actors (a run that finished cleans up after itself)."""
    for name in (REQUEST_QUEUE, WEIGHT_BROADCAST, BANDIT_STATE):
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
