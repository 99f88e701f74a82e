"""``spotlight bench regroup`` end to end (one repetition, small files) and its cost model."""

from __future__ import annotations

import json

import pytest

from spotlight.sp.bench_regroup import regroup_cost_s, restart_cost_s


def test_cost_model():
    # Qwen-Image bf16 (41 GB) at 2 GB/s from storage, 30 s process start, 5 s group init
    assert restart_cost_s(41.0, 2.0, 30.0, 5.0) == pytest.approx(55.5)
    assert regroup_cost_s(0.5) == 0.5
    assert regroup_cost_s(0.5, weights_gb=41.0, peer_gb_per_s=20.0) == pytest.approx(2.55)


def test_bench_regroup_writes_its_figures(tmp_path):
    from spotlight.cli import main

    assert (
        main(["bench", "regroup", "--out", str(tmp_path), "--repeats", "1", "--checkpoint-mb", "8"])
        == 0
    )
    r = json.loads((tmp_path / "regroup.json").read_text())
    assert r["regroup_s"] > 0 and r["cold_restart_s"] > r["regroup_s"]
    assert set(r["regroup_breakdown_s"]) == {"destroy_s", "init_s", "check_s", "policy_s"}
    assert set(r["cold_restart_breakdown_s"]) == {
        "spawn_and_import_s",
        "load_checkpoint_s",
        "init_group_s",
    }
    assert [row["sp_degree"] for row in r["sp_throughput"]] == [1, 2, 4]
    assert r["runs"]["regroup"][0]["groups"] == [2, 1]
    parts = r["replace_worker_breakdown_s"]
    assert r["replace_worker_s"] >= parts["spawn_and_import_s"] + parts["peer_weight_copy_s"] > 0
    assert not list(tmp_path.glob("*.safetensors"))  # the scratch checkpoint is gone
