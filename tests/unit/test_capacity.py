"""The capacity check: what a job asks for against what a cluster's node types can ever hold."""

from pathlib import Path

import yaml

from spotlight.scheduling import resources
from spotlight.scheduling.capacity import (
    NodeType,
    job_roles,
    lost_roles,
    most_units,
    node_types,
    shortfalls,
    units_per_node,
)

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"
S, T, R = resources.RESOURCE_SAMPLER, resources.RESOURCE_TRAINER, resources.RESOURCE_REWARD


def config(trainer_nodes=1, cap=None):
    types = {
        "head": {"resources": {"control": 1}, "max_workers": 0},
        "trainer": {"resources": {T: 8}, "max_workers": trainer_nodes},
        "spot": {"resources": {S: 8, "spot": 1}, "max_workers": 4},
        "reward": {"resources": {R: 1}, "max_workers": 1},
    }
    out = {"available_node_types": types, "head_node_type": "head"}
    if cap is not None:
        out["max_workers"] = cap
    return out


def test_node_types_count_the_head_once_and_respect_the_cluster_cap():
    by_name = {t.name: t for t in node_types(config(trainer_nodes=2))}
    assert by_name["head"].max_nodes == 1
    assert by_name["trainer"].max_nodes == 2
    assert by_name["spot"].resources == {S: 8, "spot": 1}
    capped = {t.name: t.max_nodes for t in node_types(config(trainer_nodes=2, cap=1))}
    assert capped == {"head": 1, "trainer": 1, "spot": 1, "reward": 1}


def test_whole_units_per_node():
    assert units_per_node({S: 8}, {S: 4}) == 2
    assert units_per_node({S: 8}, {S: 3}) == 2
    assert units_per_node({S: 2}, {S: 4}) == 0
    assert units_per_node({S: 8, "spot": 1}, {S: 1}) == 8
    assert units_per_node({S: 8}, {S: 1, T: 1}) == 0  # every needed resource must be there
    assert most_units(node_types(config()), {S: 4}) == 8  # 4 spot nodes x 2


def test_a_job_that_fits_has_no_shortfall():
    roles = job_roles(train_workers=8, samplers=8, workers_per_replica=4, reward_gpus=1)
    assert shortfalls(node_types(config()), roles) == []


def test_each_role_that_cannot_fit_is_named_with_its_flag_and_the_offer():
    roles = job_roles(train_workers=16, samplers=3, workers_per_replica=16, reward_gpus=2)
    msgs = shortfalls(node_types(config()), roles)
    assert len(msgs) == 3
    trainer, sampler, reward = msgs
    assert trainer.startswith("16 trainer workers (--train-workers) need 1 'trainer_gpu' each")
    assert "at most 8 (trainer: 8 per node x 1)" in trainer
    assert sampler.startswith("3 sampler replicas (--samplers, each with")
    assert "need 16 'sampler_gpu' each" in sampler and "at most 0 (spot: 0 per node x 4)" in sampler
    assert "1 model reward (--reward-gpus) needs 2 'reward_gpu' each" in reward


def test_a_resource_no_node_type_offers():
    msgs = shortfalls([NodeType("head", {"control": 1}, 1)], job_roles(1, 1, 1, 0.0))
    assert [m.endswith("(no node type offers it)") for m in msgs] == [True, True]


def test_no_reward_role_without_reward_gpus():
    assert [r.name for r in job_roles(1, 1, 1, 0.0)] == ["trainer worker", "sampler replica"]


def test_cluster_yaml_holds_the_paper_runs_documented_commands():
    """Each paper run (docs/cluster.md's commands, tested against ``PAPER_RUNS`` in
    test_scenarios.py) with a model reward."""
    from spotlight.sim.scenarios import PAPER_RUNS

    types = node_types(yaml.safe_load(CLUSTER_YAML.read_text()))
    for run in PAPER_RUNS.values():
        roles = job_roles(run.train_workers, run.samplers, run.workers_per_replica, 1.0)
        assert shortfalls(types, roles) == []
    assert shortfalls(types, job_roles(17, 1, 1, 0.0))  # one trainer worker more does not fit


def test_the_reward_deployment_asks_for_its_own_gpu_resource():
    from spotlight.deployments.reward import reward_scorer

    on_gpu = reward_scorer("ocr", gpus=1.0)._bound_deployment.ray_actor_options
    assert on_gpu["num_gpus"] == 1.0 and on_gpu["resources"][R] == 1.0
    on_cpu = reward_scorer("ocr")._bound_deployment.ray_actor_options
    assert "num_gpus" not in on_cpu and R not in on_cpu["resources"]


def test_a_run_that_lost_its_trainer_node_is_told_so_and_spot_samplers_are_not_counted():
    roles = job_roles(2, 4, 1, reward_gpus=1.0)
    head = NodeType("node 10.0.0.1", {"control": 1, T: 2, R: 1, S: 1}, 1)
    spot = NodeType("node 10.0.0.2", {S: 1, "spot": 1}, 1)
    assert lost_roles([head, spot], roles) == []  # 2 of 4 sampler replicas' nodes: not lost
    without_trainer = NodeType("node 10.0.0.1", {"control": 1, R: 1}, 1)
    (lost,) = lost_roles([without_trainer, spot], roles)
    assert lost.startswith("2 trainer workers (--train-workers) need 1 'trainer_gpu' each")
    assert "the live nodes can hold at most 0 (no node type offers it)" in lost
    assert lost_roles([spot], roles)[1].startswith("1 model reward (--reward-gpus)")
