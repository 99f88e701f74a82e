"""The local machine's fits-or-fails check: cores and memory against the job's roles."""

import pytest

from spotlight.scheduling.machine import (
    BASE_MEMORY_GB,
    REPLICA_MEMORY_GB,
    REWARD_MEMORY_GB,
    TRAINER_MEMORY_GB,
    Machine,
    check_machine,
    device_problem,
    machine_roles,
    machine_shortfalls,
    memory_limit_gb,
)

DEV = Machine(cores=2, memory_gb=24.0)
"""The development machine: 2 cores, 24 GB, no GPU."""


def roles(train_workers=1, samplers=2, workers_per_replica=1):
    return machine_roles(train_workers, samplers, workers_per_replica)


def test_the_default_job_fits_the_development_machine():
    assert machine_shortfalls(DEV, roles()) == []
    assert machine_shortfalls(DEV, roles(train_workers=2, samplers=1, workers_per_replica=2)) == []


def test_64_trainer_workers_on_2_cores_are_refused_naming_only_the_trainer():
    msgs = machine_shortfalls(DEV, roles(train_workers=64))
    assert msgs == [
        "64 trainer workers (--train-workers) need 1 core and 1.76 GB each; this machine has"
        " 2 cores and 24.0 GB, room for 2 beside Ray (3.1 GB) and the other roles"
    ]
    with pytest.raises(ValueError, match=r"^this machine cannot run the job on a local Ray: 64"):
        check_machine(64, 2, 1, "cpu", machine=DEV)


def test_memory_bounds_the_sampler_replicas():
    """Replicas need no core of their own (idle priority) but their memory is counted."""
    room = (DEV.memory_gb - BASE_MEMORY_GB - TRAINER_MEMORY_GB - REWARD_MEMORY_GB) // (
        REPLICA_MEMORY_GB
    )
    assert machine_shortfalls(DEV, roles(samplers=int(room))) == []
    (msg,) = machine_shortfalls(DEV, roles(samplers=int(room) + 1))
    assert msg.startswith(f"{int(room) + 1} sampler replicas (--samplers) need 0.74 GB each")
    assert msg.endswith(f"room for {int(room)} beside Ray (3.1 GB) and the other roles")
    # an SP replica of 4 worker processes holds 4 x the memory
    (msg,) = machine_shortfalls(DEV, roles(samplers=8, workers_per_replica=4))
    assert "need 2.96 GB each" in msg


def test_roles_that_each_fit_but_not_together_are_all_named():
    small = Machine(cores=8, memory_gb=BASE_MEMORY_GB + 5.0)
    # 2 trainers (3.52 GB) fit beside one replica and the reward; 3 replicas (2.22 GB) fit
    # beside one trainer; together 3.52 + 2.22 + 0.44 > 5
    msgs = machine_shortfalls(small, roles(train_workers=2, samplers=3))
    assert [m.split(" (")[0] for m in msgs] == [
        "2 trainer workers",
        "3 sampler replicas",
        "1 reward replica",
    ]
    assert all(m.endswith("not for all the roles together") for m in msgs)


def test_device_problems_name_the_flag():
    assert device_problem("cpu", 0) is None
    assert device_problem("cuda", 1) is None
    assert device_problem("cuda:1", 2) is None
    assert device_problem("cuda", 0) == (
        "--device cuda: this machine has no CUDA GPU (torch sees none); use --device cpu"
    )
    assert "has 2 CUDA GPU(s), cuda:0..1" in device_problem("cuda:2", 2)
    for bad in ("gpu", "cuda:x", "cpu:0", ""):
        assert device_problem(bad, 8).startswith(f"--device {bad}: not a device")


def test_memory_limit_is_the_lower_of_the_machine_and_its_cgroup():
    meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\n"
    assert memory_limit_gb(meminfo, None) == pytest.approx(24.576)
    assert memory_limit_gb(meminfo, "max\n") == pytest.approx(24.576)
    assert memory_limit_gb(meminfo, "8000000000\n") == pytest.approx(8.0)


def test_the_cli_refuses_in_one_line_before_the_run_folder_or_ray(tmp_path, capsys, monkeypatch):
    """`spotlight train --train-workers 64` on a local Ray; `--device cuda` without CUDA."""
    import torch

    from spotlight.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("spotlight.scheduling.machine.this_machine", lambda: DEV)
    out = tmp_path / "run"
    base = ["train", "--iterations", "1", "--no-wandb", "--out", str(out)]
    assert main([*base, "--train-workers", "64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotlight: error: this machine cannot run the job on a local Ray: 64")
    assert err.count("\n") == 1 and not out.exists()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # a cluster: its own capacity check
    monkeypatch.setattr("spotlight.job.run.run_ray", lambda *a, **k: None)
    assert main([*base, "--train-workers", "64"]) == 0
    if torch.cuda.is_available():
        return
    for runner in ("ray", "local"):
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        assert main([*base, "--device", "cuda", "--runner", runner]) == 2
        err = capsys.readouterr().err
        assert err == (
            "spotlight: error: --device cuda: this machine has no CUDA GPU (torch sees none);"
            " use --device cpu\n"
        )
        assert not out.exists()
