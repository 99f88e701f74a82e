"""cluster.yaml passes Ray's own cluster-config validation and keeps the roles apart."""

from pathlib import Path

import pytest
import yaml
from jsonschema.exceptions import ValidationError

from spotlight.actors import names

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"


def load() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_ray_validates_the_cluster_config():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(load())
    validate_config(config)  # raises on any schema error
    assert config["head_node_type"] == "head"
    broken = load()
    broken["available_node_types"]["sampler_spot"]["resources"]["spot"] = "one"
    with pytest.raises(ValidationError, match=r"not of type .integer."):  # the check bites
        validate_config(prepare_config(broken))


def test_node_types_offer_the_roles_the_system_places_work_on():
    types = load()["available_node_types"]
    spot = [
        n
        for n, t in types.items()
        if t["node_config"].get("InstanceMarketOptions", {}).get("MarketType") == "spot"
    ]
    assert spot == ["sampler_spot"]
    assert types["sampler_spot"]["resources"][names.RESOURCE_SPOT] == 1
    # The fallback offers the same sampler resource on on-demand capacity, at lower priority.
    fallback = types["sampler_ondemand"]
    assert names.RESOURCE_SAMPLER in fallback["resources"]
    assert names.RESOURCE_ON_DEMAND in fallback["resources"]
    assert fallback["priority"] < types["sampler_spot"]["priority"]
    assert names.RESOURCE_TRAINER in types["trainer"]["resources"]
    assert "InstanceMarketOptions" not in types["trainer"]["node_config"]
    assert types["head"]["resources"][names.RESOURCE_CONTROL] == 1


def test_the_head_starts_locked_and_every_node_joins_with_the_token():
    """Token authentication on at `ray start --head` (Ray 2.60 turns it on there only through
    RAY_AUTH_MODE=token or an existing token file), the dashboard and job API on the head's
    localhost, the token file on every node, the workers joining in token mode."""
    config = load()
    (head_start,) = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    words = head_start.split()
    assert "RAY_AUTH_MODE=token" in words[: words.index("ray")]
    assert "--head" in words and "--dashboard-host=127.0.0.1" in words
    (worker_start,) = [c for c in config["worker_start_ray_commands"] if "ray start" in c]
    assert worker_start.split()[0] == "RAY_AUTH_MODE=token"
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


def test_the_reward_has_a_gpu_resource_of_its_own():
    types = load()["available_node_types"]
    offering = [n for n, t in types.items() if names.RESOURCE_REWARD in t["resources"]]
    assert offering == ["reward"]
    assert names.RESOURCE_TRAINER not in types["reward"]["resources"]
    assert names.RESOURCE_SAMPLER not in types["reward"]["resources"]
