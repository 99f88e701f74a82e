"""cluster.yaml passes Ray's own cluster-config validation and keeps the roles apart."""

import tomllib
from pathlib import Path

import pytest
import yaml
from jsonschema.exceptions import ValidationError

from spotlight.scheduling import resources

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
    assert spot == ["sampler_spot", "sampler_spot_p5e", "sampler_spot_p4de"]
    instance = [types[n]["node_config"]["InstanceType"] for n in spot]
    assert instance == ["p5.48xlarge", "p5e.48xlarge", "p4de.24xlarge"]
    # Identical resources (so the autoscaler's utilization score ties), then priority decides.
    assert all(types[n]["resources"] == types["sampler_spot"]["resources"] for n in spot)
    assert types["sampler_spot"]["resources"][resources.RESOURCE_SPOT] == 1
    assert types["sampler_spot"]["resources"][resources.RESOURCE_SAMPLER] == 8
    assert types["sampler_spot"]["resources"]["CPU"] <= 96  # p4de.24xlarge's vCPUs
    priorities = [types[n]["priority"] for n in spot]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == 3
    # The fallback offers the same sampler resource on on-demand capacity, at lower priority.
    fallback = types["sampler_ondemand"]
    assert resources.RESOURCE_SAMPLER in fallback["resources"]
    assert resources.RESOURCE_ON_DEMAND in fallback["resources"]
    assert fallback["priority"] < min(priorities)
    assert resources.RESOURCE_TRAINER in types["trainer"]["resources"]
    assert "InstanceMarketOptions" not in types["trainer"]["node_config"]
    assert types["head"]["resources"][resources.RESOURCE_CONTROL] == 1


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
    offering = [n for n, t in types.items() if resources.RESOURCE_REWARD in t["resources"]]
    assert offering == ["reward"]
    assert resources.RESOURCE_TRAINER not in types["reward"]["resources"]
    assert resources.RESOURCE_SAMPLER not in types["reward"]["resources"]


def test_every_node_boots_the_pinned_image_with_shared_storage():
    """One host AMI (NVIDIA driver and container toolkit) and one container image everywhere;
    the head exports /shared, every other node mounts it from the head, the container sees it;
    the setup installs boto3 (the head's AWS autoscaler imports it)."""
    config = load()
    types = config["available_node_types"]
    images = {t["node_config"]["ImageId"] for t in types.values()}
    assert len(images) == 1 and next(iter(images)).startswith("resolve:ssm:/aws/service/")
    assert config["docker"]["image"].startswith("rayproject/ray:2.60.0-py311-cu")
    assert "-v /shared:/shared" in config["docker"]["run_options"]
    head_init = " ".join(config["initialization_commands"])
    assert "exportfs" in head_init and "/etc/exports" in head_init
    for name, t in types.items():
        if name == config["head_node_type"]:
            continue
        mount = " ".join(t["initialization_commands"])
        assert "$RAY_HEAD_IP:/shared /shared" in mount and "mount -t nfs4" in mount, name
    (setup,) = [c for c in config["setup_commands"] if "setup.sh" in c]
    assert "SPOTLIGHT_EXTRAS=dev,aws" in setup and "SPOTLIGHT_TORCH=gpu" in setup
    pyproject = tomllib.loads((CLUSTER_YAML.parent / "pyproject.toml").read_text())
    assert any(d.startswith("boto3") for d in pyproject["project"]["optional-dependencies"]["aws"])
