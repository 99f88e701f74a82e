"""cluster.yaml's node types on Ray's fake multi-node autoscaler: a two-iteration tiny job with the
paper runs' placement (trainer workers on the trainer type, an SP sampler replica on spot, the
reward on its own node) makes the autoscaler launch those nodes from zero, and a job the node
types can never hold is refused in seconds.

The fake provider starts every "node" as raylet processes on this machine, with the node type's
resources as given: GPUs are counted, not used (the job runs on the CPU), and the counts are
scaled from 8 a node to ``GPUS``. ``AutoscalingCluster.start`` and ``shutdown`` run ``ray stop
--force``: this module stops any other Ray on the machine.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from ray_tests.helpers import ray_options, smoke
from spotlight.actors import names
from spotlight.scheduling import resources

pytestmark = pytest.mark.ray_exclusive  # no other Ray test beside it (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
AUTOSCALER_V2 = True
"""As cluster.yaml's head runs it (RAY_enable_autoscaler_v2=1)."""
GPUS = 2
"""GPUs a fake node of an 8-GPU type (the reward type keeps its one)."""
ROLE_GPUS = (resources.RESOURCE_SAMPLER, resources.RESOURCE_TRAINER, resources.RESOURCE_REWARD)


def fake_node_types(cluster: dict) -> dict:
    """cluster.yaml's worker node types for the fake provider: the same custom resources,
    priorities and limits, GPU counts scaled to ``GPUS``, a few CPUs a node, and the type's name
    as a node label."""
    out = {}
    for name, spec in cluster["available_node_types"].items():
        if name == cluster["head_node_type"]:
            continue
        res = {k: v for k, v in spec["resources"].items() if k not in ("memory", "GPU")}
        for key in ROLE_GPUS:
            if res.get(key, 0) >= 8:
                res[key] = res[key] * GPUS // 8
        # the GPUs AWS's provider fills in from the instance type: the role's count
        res["GPU"] = sum(res.get(key, 0) for key in ROLE_GPUS)
        res["CPU"] = 4
        out[name] = {
            "resources": res,
            "node_config": {},
            "labels": {**spec.get("labels", {}), "node_type": name},
            "min_workers": spec.get("min_workers", 0),
            "max_workers": min(spec["max_workers"], 2),
        }
        if "priority" in spec:
            out[name]["priority"] = spec["priority"]
    return out


@pytest.fixture(scope="module")
def fake_cluster(tmp_path_factory):
    """The fake cluster (autoscaler v2, as cluster.yaml's head runs it) and the path of the
    cluster config its autoscaler runs with."""
    import ray
    from ray.cluster_utils import AutoscalingCluster

    cluster = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    head = cluster["available_node_types"][cluster["head_node_type"]]["resources"]

    class FromClusterYaml(AutoscalingCluster):
        def _generate_config(self, head_resources, worker_node_types, autoscaler_v2=False, **kw):
            # Ray's wheel does not ship fake_multi_node/example.yaml: the whole config here.
            config = {
                "cluster_name": "spotlight-fake",
                "max_workers": cluster["max_workers"],
                "upscaling_speed": 1.0,
                "idle_timeout_minutes": 5,
                "provider": {
                    # the fake provider as an external one: the "fake_multinode" type reads
                    # its defaults from fake_multi_node/example.yaml, which the wheel lacks
                    "type": "external",
                    "module": "ray.autoscaler._private.fake_multi_node.node_provider"
                    ".FakeMultiNodeProvider",
                    "use_node_id_as_ip": True,
                    "disable_node_updaters": True,
                    "disable_launch_config_check": True,
                },
                "auth": {"ssh_user": "ubuntu"},
                "available_node_types": {
                    **worker_node_types,
                    "ray.head.default": {
                        "resources": dict(head_resources),
                        "node_config": {},
                        "max_workers": 0,
                    },
                },
                "head_node_type": "ray.head.default",
                "file_mounts": {},
                "cluster_synced_files": [],
                "file_mounts_sync_continuously": False,
                "rsync_exclude": [],
                "rsync_filter": [],
                "initialization_commands": [],
                "setup_commands": [],
                "head_setup_commands": [],
                "worker_setup_commands": [],
                "head_start_ray_commands": [],
                "worker_start_ray_commands": [],
                "docker": {},
            }
            if autoscaler_v2:
                from ray.autoscaler._private.fake_multi_node.node_provider import (
                    FAKE_HEAD_NODE_ID,
                )

                config["provider"]["launch_multiple"] = True
                config["provider"]["head_node_id"] = FAKE_HEAD_NODE_ID
            return config

    # The head: cluster.yaml's markers and the control resource, CPUs for the driver's helpers.
    # Its custom resources go through RAY_OVERRIDE_RESOURCES: Ray 2.60's start() quotes its
    # --resources flag for a shell and passes it without one, which `ray start` rejects.
    custom = {k: v for k, v in head.items() if k != "CPU"}
    head_resources = {**custom, "CPU": 2}
    fake = FromClusterYaml(head_resources, fake_node_types(cluster), autoscaler_v2=AUTOSCALER_V2)
    fake._head_resources = {"CPU": 2}
    config_path = tmp_path_factory.mktemp("fake") / "bootstrap.yaml"
    config_path.write_text(yaml.safe_dump(fake._config))
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{path}"  # its `ray` CLI
    fake.start(
        override_env={"RAY_AUTH_MODE": "disabled", "RAY_OVERRIDE_RESOURCES": json.dumps(custom)}
    )
    try:
        ray.init(address="auto", namespace=names.NAMESPACE)
        yield config_path
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
        fake.shutdown()
        os.environ["PATH"] = path


def _launched() -> dict[str, int]:
    """Live worker nodes by node type (the label the fake config gives each)."""
    import ray

    out: dict[str, int] = {}
    for n in ray.nodes():
        kind = n.get("Labels", {}).get("node_type")
        if n["Alive"] and kind:
            out[kind] = out.get(kind, 0) + 1
    return out


def test_an_impossible_job_is_refused_in_seconds(fake_cluster, tmp_path, monkeypatch):
    from spotlight.job.run import run_ray

    monkeypatch.setenv("SPOTLIGHT_CLUSTER_CONFIG", str(fake_cluster))
    t0 = time.monotonic()
    with pytest.raises(
        ValueError, match=r"never run the job .* 5 trainer workers \(--train-workers\)"
    ):
        run_ray(smoke(), tmp_path / "run", opts=ray_options(num_train_workers=5, num_samplers=1))
    assert time.monotonic() - t0 < 30
    assert _launched() == {}  # nothing was asked for, nothing launched


def test_the_paper_placement_scales_up_from_zero(fake_cluster, tmp_path, monkeypatch):
    from spotlight.job import run as job_run

    monkeypatch.setenv("SPOTLIGHT_CLUSTER_CONFIG", str(fake_cluster))
    # The fake nodes share this machine's disk: storage is tested in tests/unit/test_storage.py.
    monkeypatch.setattr(job_run, "check_storage", lambda out_dir, joined: None)
    assert _launched() == {}
    log = io.StringIO()
    opts = ray_options(
        num_train_workers=GPUS,  # one trainer node's worth
        num_samplers=1,
        sp_workers=GPUS,  # one spot node a replica, as paper-1280
        reward_gpus=1.0,
        spill="never",
        item_timeout_s=240.0,
    )
    summary = job_run.run_ray(smoke(), tmp_path / "run", opts=opts, log=log)
    assert summary["num_iterations"] == 2, log.getvalue()[-3000:]
    launched = _launched()
    # the highest-priority spot type, never the on-demand fallback; the trainer and the
    # reward on their own types
    assert launched == {"trainer": 1, "reward": 1, "sampler_spot": 1}, launched
    assert "waiting for the autoscaler" in log.getvalue()
