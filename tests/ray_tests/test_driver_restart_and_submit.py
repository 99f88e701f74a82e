"""The job as users run it on a cluster: a driver killed, its run resumed with ray job submit."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ray_tests.helpers import ray_options, smoke
from spotlight.job.options import local_resources
from spotlight.policies import make_policy
from spotlight.ports import free_port
from spotlight.rewards import build_reward
from spotlight.training.loop import ReferenceLoop

pytestmark = pytest.mark.slow

TRAIN = [sys.executable, "-m", "spotlight.cli", "train", "--recipe", "tiny-smoke", "--no-wandb"]
TRAIN += ["--trainer-threads", "1", "--iterations", "3"]


def _env(**extra) -> dict:
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1", **extra}


def _rows(path: Path) -> list[dict]:
    f = path / "metrics.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines() if x] if f.exists() else []


PIPELINED = [
    "schedule=pipelined",
    "exploration.mode=spot",
    "exploration.budget_seeds=8",
    "grpo.loss=nft",
]
"""The killed driver's run: the pipelined schedule, 8 candidates (for one of the 2 prompts; the
other samples its own 4 seeds), DiffusionNFT (its v_old the weights that sampled the batch)."""


def _reference(iterations: int, overrides: list[str] = ()) -> tuple[dict, list[dict], dict]:
    """The reference loop's final weights, rows and planner."""
    from spotlight.overrides import apply_overrides

    cfg = apply_overrides(smoke(iterations), list(overrides))
    torch.set_num_threads(1)
    loop = ReferenceLoop(cfg, make_policy(cfg.policy), build_reward(cfg.reward))
    rows = [loop.run_iteration(i) for i in range(iterations)]
    return loop.policy.state_dict(), rows, loop.explore.planner.to_dict()


def _assert_trained_once(out: Path, overrides: list[str] = ()) -> None:
    rows = _rows(out)
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert [r["weights_version"] for r in rows] == [1, 2, 3]
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert state["iterations_done"] == 3 and state["weights_version"] == 3
    # An update applied twice (or skipped) would move the weights away from the reference.
    trained = load_file(str(out / "checkpoint" / "policy.safetensors"))
    weights, ref_rows, planner = _reference(3, overrides)
    for got, want in zip(rows, ref_rows, strict=True):  # the local runner's selections
        for key in ("seeds_explored", "explore_prompts", "num_samples"):
            assert got.get(key) == want.get(key), key
        assert got["train_reward_mean"] == pytest.approx(want["train_reward_mean"], abs=1e-6)
    for k, v in weights.items():
        torch.testing.assert_close(trained[k], v, atol=1e-6, rtol=1e-5)
    # the planner counted every iteration once (the resume takes the checkpoint's planner)
    got = json.loads((out / "bandit_state.json").read_text())["planner"]["arms"]
    assert got.keys() == planner["arms"].keys() and got
    for arm, stats in planner["arms"].items():
        assert got[arm] == pytest.approx(stats, abs=1e-6), arm


@contextlib.contextmanager
def _ray_head():
    """``ray start --head`` with the job's resources and the dashboard (its job server), as on
    a cluster's head node; yields (the GCS address, the job server's address)."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    port, dash = free_port(), free_port()
    # Every fixed-default port moved off its default, so another Ray on the machine (a local
    # run, a second test session) cannot take the job agent's port.
    agent, grpc, metrics, env_agent, client = (free_port() for _ in range(5))
    resources = json.dumps(local_resources(ray_options()))
    # Its own temp dir: a job's driver joins the cluster named by the temp dir's
    # ray_current_cluster file (Ray's job supervisor resolves "auto" there), which a Ray started
    # later on this machine with the default temp dir (another test's) would overwrite. A
    # short path: Ray's socket paths live under it.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=6",
         f"--temp-dir={temp_dir}",
         f"--resources={resources}", "--include-dashboard=true", f"--dashboard-port={dash}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
         f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={env_agent}",
         f"--ray-client-server-port={client}"],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # the GCS listens: drivers can join
        while time.monotonic() < deadline and head.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}"
    finally:
        # `ray start --block` does not exit on SIGTERM (it waited out any timeout given here):
        # a few seconds to flush, then its process group (the GCS, raylet, dashboard and the
        # processes they started) is killed.
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for_job_server(submit: list[str], answer: dict) -> None:
    """Until the cluster accepts jobs: the dashboard answers before the node's job agent is up
    ("No available agent to submit job, please try again later"). ``answer`` gets the last
    probe's return code and error output."""
    deadline = time.monotonic() + 180
    while True:
        probe = subprocess.run(
            [*submit, "echo", "ready"], env=_env(), capture_output=True, text=True, timeout=120
        )
        if probe.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    answer.update(returncode=probe.returncode, stderr=probe.stderr[-2000:])


def test_a_killed_driver_is_resumed_with_ray_job_submit_and_trains_nothing_twice(tmp_path):
    """A driver started on a live cluster is killed mid-pipeline: the next iteration's rollout
    (with its candidates) was in the queue, sampled on the weights before the last update. The
    run is resumed as users run jobs, with ``ray job submit``: the resumed driver resubmits the
    rollout (finished items reused), its trainer publishes those weights again from the
    checkpoint (and, with ``--trainer-samples``, samples what is left of a rollout with them),
    the job succeeds, and the run ends on the local runner's selections, rewards and
    weights."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    out = tmp_path / "run"
    log = (tmp_path / "first.log").open("w")
    with _ray_head() as (address, job_server), contextlib.closing(log):
        submit = [ray_bin, "job", "submit", f"--address={job_server}", "--"]
        answer: dict = {}  # the job server comes up while the first driver runs
        waiter = threading.Thread(target=_wait_for_job_server, args=(submit, answer), daemon=True)
        waiter.start()
        sets = [a for kv in PIPELINED for a in ("--set", kv)]
        first = subprocess.Popen(
            [*TRAIN, *sets, "--trainer-samples", "--out", str(out)],
            env=_env(RAY_ADDRESS=address),
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 240
        state_file = out / "checkpoint" / "state.json"  # the commit: written after the row
        while not state_file.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state_file.exists(), (tmp_path / "first.log").read_text()[-3000:]
        first.send_signal(signal.SIGKILL)  # mid-run: its trainer and the next iteration die
        first.wait()
        done_before = json.loads((out / "checkpoint" / "state.json").read_text())
        assert done_before["iterations_done"] < 3
        assert (
            done_before["pending_rollout"]["weights_version"] == done_before["weights_version"] - 1
        )

        waiter.join()
        assert answer["returncode"] == 0, answer["stderr"]
        job = subprocess.run(
            [*submit, *TRAIN[:-2], "--trainer-samples", "--resume", str(out)],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout
        assert "reusing the queue's finished items" in job.stdout  # same actors, same run
        _assert_trained_once(out, PIPELINED)
        assert [r["rollout_lag"] for r in _rows(out)] == [0, 1, 1]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["runner"] == "ray" and summary["num_iterations"] == 3
