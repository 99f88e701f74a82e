"""benchmarks/soak.py's pure parts: roles, slopes, growth per 100 iterations, records."""

import runpy
from pathlib import Path

import pytest

SOAK = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"))


def test_roles_are_named_and_numbered_in_the_order_first_seen():
    role_of, seen = SOAK["role_of"], {}
    assert role_of("RequestQueue", seen, "a1") == "queue"
    assert role_of("ServeReplica:spotlight:SamplerReplica", seen, "r1") == "replica_0"
    assert role_of("ServeReplica:spotlight:RewardScorer", seen, "w1") == "reward"
    assert role_of("ServeReplica:spotlight:SamplerReplica", seen, "r2") == "replica_1"
    assert role_of("RayTrainWorker", seen, "t1") == "trainer_0"
    assert role_of("ServeController", seen, "c1") == "other_ServeController"
    assert role_of("ServeReplica:spotlight:SamplerReplica", seen, "r1") == "replica_0"  # kept


def test_slope_is_least_squares():
    slope = SOAK["slope"]
    assert slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert slope([0, 1, 2], [0, 1, 0]) == pytest.approx(0.0)
    assert slope([5], [1]) is None and slope([2, 2], [1, 3]) is None


def test_growth_is_fitted_from_the_start_iteration_per_role_and_object_store():
    records = [
        {
            "iteration": i,
            "rss_mb": {"driver": 500 + (0 if i < 20 else 0.3 * i)},
            "object_store_mb": 10,
        }
        for i in range(40)
    ]
    records[5]["rss_mb"]["driver"] = 9000  # before iteration 20: ignored
    records[30]["rss_mb"]["queue"] = 80.0  # one point: no slope
    growth = SOAK["growth_per_100"](records, start=20)
    assert growth == {"driver": pytest.approx(30.0), "object_store": pytest.approx(0.0)}


def test_an_iteration_record_takes_its_wall_time_from_the_previous_row():
    row = {"iteration": 3, "wall_s": 50.5, "sample_s": 6.0, "train_s": 5.0, "val_reward": 0.2}
    r = SOAK["iteration_record"](row, 38.0, {"rss_mb": {"driver": 1.0}, "open_fds": 7})
    assert r["wall_s_iteration"] == pytest.approx(12.5)
    assert r["validated"] is True and r["sample_s"] == 6.0 and r["open_fds"] == 7
    assert (
        SOAK["iteration_record"]({"iteration": 4, "wall_s": 60.0}, 50.5, {})["validated"] is False
    )


def test_time_drift_compares_plain_iterations_and_takes_the_machine_out():
    records = []
    for i in range(150):
        machine = 1.0 if i < 80 else 1.2  # the host got 20% slower from iteration 80 on
        job = 10.0 if i < 100 else 10.5  # the job itself 5% slower from iteration 100 on
        records.append(
            {
                "iteration": i,
                "validated": i % 40 == 39,
                "wall_s_iteration": 99.0 if i % 40 == 39 else job * machine,
                "probe_s": 0.05 * machine,
            }
        )
    d = SOAK["time_drift"](records)
    assert d["wall_s_early"] == pytest.approx(10.0)  # validations (39) left out
    assert d["wall_s_late"] == pytest.approx(12.6)
    assert d["wall_s_ratio"] == pytest.approx(1.26)
    assert d["probe_s_ratio"] == pytest.approx(1.2)
    assert d["wall_per_probe_ratio"] == pytest.approx(1.05)
    assert SOAK["time_drift"](records[:100]) is None  # no late range yet


def test_machine_probe_takes_the_median_of_its_repeats():
    t = SOAK["machine_probe_s"](repeats=3)
    assert 0 < t < 5
