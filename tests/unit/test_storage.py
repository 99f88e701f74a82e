"""Where a cluster job's files live: the run folder on shared storage, model folders on nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotlight.scheduling.storage import (
    SHARED_FSTYPES,
    StorageMissing,
    mount_of,
    out_dir_problem,
    read_mounts,
    require_paths,
    storage_error_in,
)

PROC_MOUNTS = """\
/dev/root / ext4 rw,relatime,discard 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /run tmpfs rw,nosuid,nodev,size=1000k 0 0
fs-0123.efs.us-east-1.amazonaws.com:/ /shared nfs4 rw,relatime,vers=4.1 0 0
/dev/nvme1n1 /opt/dlami/nvme ext4 rw,relatime 0 0
/dev/sdb /mnt/my\\040disk xfs rw 0 0
"""


def test_read_mounts_parses_points_types_and_escaped_spaces():
    mounts = read_mounts(PROC_MOUNTS)
    assert ("/shared", "nfs4") in mounts
    assert ("/mnt/my disk", "xfs") in mounts
    assert len(mounts) == 6


def test_mount_of_takes_the_deepest_mount_point():
    mounts = read_mounts(PROC_MOUNTS)
    assert mount_of("/shared/runs/qwen-1", mounts) == ("/shared", "nfs4")
    assert mount_of("/shared", mounts) == ("/shared", "nfs4")
    assert mount_of("/home/ubuntu/runs", mounts) == ("/", "ext4")
    assert mount_of("/sharedx/runs", mounts) == ("/", "ext4")  # a prefix is not a parent
    assert mount_of("/opt/dlami/nvme/w", mounts) == ("/opt/dlami/nvme", "ext4")
    assert mount_of("/x", []) == ("/", "unknown")


def test_run_folder_must_be_on_shared_storage():
    mounts = read_mounts(PROC_MOUNTS)
    assert out_dir_problem("/shared/runs/qwen-1", mounts) is None
    problem = out_dir_problem("/home/ubuntu/runs/qwen-1", mounts)
    assert problem is not None
    assert "--out /home/ubuntu/runs/qwen-1" in problem and "ext4 at /" in problem
    assert "/shared" in problem and "docs/cluster.md#storage" in problem
    local_nvme = out_dir_problem("/opt/dlami/nvme/runs", mounts)
    assert local_nvme is not None and "ext4 at /opt/dlami/nvme" in local_nvme


def test_missing_model_folder_names_node_setting_and_path():
    present = {"/shared/models/Qwen-Image"}
    require_paths(
        "10.0.1.5",
        "sampler replica",
        {"policy.checkpoint": "/shared/models/Qwen-Image"},
        present.__contains__,
    )
    with pytest.raises(StorageMissing) as e:
        require_paths(
            "10.0.1.7",
            "trainer worker 3",
            {"policy.checkpoint": "/shared/models/Qwen-Image", "reward_model": "/shared/ocr"},
            exists=lambda p: False,
        )
    text = str(e.value)
    assert "trainer worker 3 on node 10.0.1.7" in text
    assert (
        "policy.checkpoint=/shared/models/Qwen-Image" in text and "reward_model=/shared/ocr" in text
    )
    assert isinstance(e.value, FileNotFoundError)


def test_relative_and_empty_paths_are_left_to_the_loaders():
    require_paths(
        "n",
        "reward",
        {"reward_model": None, "policy.checkpoint": "runs/base.safetensors", "x": ""},
        exists=lambda p: False,
    )


def test_driver_finds_the_message_inside_a_replica_traceback():
    try:
        require_paths(
            "10.0.1.9",
            "sampler replica",
            {"policy.checkpoint": "/shared/m"},
            exists=lambda p: False,
        )
    except StorageMissing as e:
        error = e
    wrapped = (
        "Deploying application 'spotlight' failed: Traceback (most recent call last):\n"
        '  File "sampler.py", line 110, in __init__\n'
        f"spotlight.scheduling.storage.StorageMissing: {error}\n"
    )
    message = storage_error_in(wrapped)
    assert message is not None and message.startswith("sampler replica on node 10.0.1.9: missing")
    assert storage_error_in("RuntimeError: CUDA out of memory") is None


def test_the_driver_checks_the_run_folder_only_on_a_ray_up_cluster(tmp_path, monkeypatch):
    """With the autoscaler config `ray up` leaves on the head, a run folder on this machine's
    own disk is refused; a local Ray (not joined) or nodes started by hand (no config) are not
    judged."""
    from spotlight.job.cluster import check_storage

    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.setenv("SPOTLIGHT_CLUSTER_CONFIG", str(tmp_path / "missing.yaml"))
    check_storage(out, joined=True)  # no autoscaler config: nodes started by hand
    config = tmp_path / "bootstrap.yaml"
    config.write_text("cluster_name: x\navailable_node_types: {}\n")
    monkeypatch.setenv("SPOTLIGHT_CLUSTER_CONFIG", str(config))
    check_storage(out, joined=False)  # a local Ray
    _, fstype = mount_of(str(out.resolve()), read_mounts(Path("/proc/mounts").read_text()))
    if fstype in SHARED_FSTYPES:
        pytest.skip(f"{tmp_path} is on a network file system here ({fstype})")
    with pytest.raises(ValueError, match=rf"--out {out.resolve()} is on this node's own disk"):
        check_storage(out, joined=True)


def test_a_failed_deployment_or_trainer_with_a_missing_folder_becomes_one_error():
    from spotlight.job.launch import TrainerRun, raise_storage_error

    line = "StorageMissing: trainer worker 0 on node 10.0.1.3: missing policy.checkpoint=/shared/m"
    raise_storage_error(RuntimeError("Deploying app failed: CUDA error"))  # not ours: no raise
    with pytest.raises(FileNotFoundError) as e:
        raise_storage_error(RuntimeError(f"Traceback (most recent call last):\n  ...\n{line}\n"))
    assert str(e.value).startswith("trainer worker 0 on node 10.0.1.3: missing")
    run = TrainerRun(error=RuntimeError(f"Training failed.\n{line}"))
    with pytest.raises(FileNotFoundError, match=r"policy\.checkpoint=/shared/m"):
        run.check()
    with pytest.raises(RuntimeError, match="the trainer failed: boom"):
        TrainerRun(error=ValueError("boom")).check()
