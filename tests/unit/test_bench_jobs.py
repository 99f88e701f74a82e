"""Bench runs at once, each in its own process: the same runs as one at a time, and stopped
whole on a failure or a signal."""

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from spotlight import interrupts
from spotlight.bench_jobs import run_parallel


def _smoke_bench(out: Path, jobs: int) -> list[str]:
    return [
        "bench", "exploration", "--runner", "local", "--recipe", "tiny-smoke",
        "--iterations", "2", "--val-every", "1", "--seeds", "0", "1", "--modes", "off", "spot",
        "--target-delta", "0.0", "--budget-seeds", "12", "--set", "num_val_seeds=1",
        "--jobs", str(jobs), "--out", str(out),
    ]  # fmt: skip


def test_runs_at_once_equal_runs_one_at_a_time(tmp_path, capsys):
    from spotlight.cli import main

    assert main(_smoke_bench(tmp_path / "one", 1)) == 0
    assert main(_smoke_bench(tmp_path / "two", 2)) == 0
    said = capsys.readouterr().out
    assert "[bench] spot, seed 1 finished" in said  # runs end out of order: each is named
    for run in ("off-seed0", "spot-seed0", "off-seed1", "spot-seed1"):
        one, two = (tmp_path / d / "runs" / run for d in ("one", "two"))
        a, b = (load_file(d / "checkpoint/policy.safetensors") for d in (one, two))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    reports = [json.loads((tmp_path / d / "exploration.json").read_text()) for d in ("one", "two")]
    curves = [
        {
            m: [[p[0], p[2]] for r in v["runs"] for p in r["val_curve"]]
            for m, v in doc["modes"].items()
        }
        for doc in reports
    ]
    assert curves[0] == curves[1]
    assert main([*_smoke_bench(tmp_path / "ray", 2), "--runner", "ray"]) == 2
    assert "more than 1 needs --runner local" in capsys.readouterr().err


def _fail_on_seed_1(cfg, run_dir: Path, resume: bool) -> None:
    if cfg == 1:
        raise RuntimeError("boom")
    run_dir.mkdir(parents=True)


def _sleep(cfg, run_dir: Path, resume: bool) -> None:
    run_dir.mkdir(parents=True)
    time.sleep(60)


def test_a_failed_run_stops_the_bench_naming_it(tmp_path):
    done = []
    work = [(f"r{i}", i, tmp_path / f"r{i}", False) for i in range(3)]
    with pytest.raises(RuntimeError, match="bench run r1 failed"):
        run_parallel(work, _fail_on_seed_1, jobs=1, threads=1, on_done=done.append)
    assert done == ["r0"] and not (tmp_path / "r2").exists()  # nothing started after it
    with pytest.raises(ValueError, match="need jobs >= 1"):
        run_parallel(work, _fail_on_seed_1, jobs=0, threads=1, on_done=done.append)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_run_and_is_raised(tmp_path, signum):
    work = [(f"r{i}", i, tmp_path / f"r{i}", False) for i in range(3)]
    started = []

    def stop_when_both_run(name: str) -> None:
        started.append(name)
        if len(started) == 2:
            # process-directed, as from `kill`: the main thread, waiting on the runs, takes it
            threading.Timer(5.0, os.kill, (os.getpid(), signum)).start()

    t0 = time.monotonic()
    with pytest.raises(interrupts.Interrupted) as stopped, interrupts.handled():
        run_parallel(work, _sleep, 2, 1, on_done=lambda name: None, on_start=stop_when_both_run)
    assert started == ["r0", "r1"] and time.monotonic() - t0 < 50
    assert stopped.value.signum == signum
    assert multiprocessing.active_children() == []  # both stopped and joined
