"""Bench runs at once, each in its own process: the same runs as one at a time, and stopped
whole on a failure or a signal."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from spotlight import interrupts
from spotlight.bench_jobs import RunFailed, _failure, run_parallel

from .jobs_helpers import fail_on_config_1, sleep_until_stopped


def _smoke_bench(out: Path, jobs: int) -> list[str]:
    return [
        "bench", "exploration", "--runner", "local", "--recipe", "tiny-smoke",
        "--iterations", "2", "--val-every", "1", "--seeds", "0", "--modes", "off", "spot",
        "--target-delta", "0.0", "--budget-seeds", "12", "--set", "num_val_seeds=1",
        "--jobs", str(jobs), "--out", str(out),
    ]  # fmt: skip


@pytest.mark.slow
def test_runs_at_once_equal_runs_one_at_a_time(tmp_path, capsys, monkeypatch):
    from spotlight.cli import main

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # one at a time on 2 threads, at once on 1 each (2 cores or not)
    try:
        assert main(_smoke_bench(tmp_path / "one", 1)) == 0
    finally:
        torch.set_num_threads(before)
    monkeypatch.setattr("spotlight.rewards.ocr.available_cpus", lambda: 2)  # 1 thread each
    assert main(_smoke_bench(tmp_path / "two", 2)) == 0
    said = capsys.readouterr().out
    assert "[bench] spot, seed 0 finished" in said  # runs end out of order: each is named
    for run in ("off-seed0", "spot-seed0"):
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


def test_a_failed_run_stops_the_others_and_is_named(tmp_path):
    done = []
    work = [(f"r{i}", i, tmp_path / f"r{i}", False) for i in range(4)]
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match=r"bench run r1 failed \(exit code 1"):
        run_parallel(work, fail_on_config_1, jobs=2, threads=1, on_done=done.append)
    assert time.monotonic() - t0 < 50  # r2 (60 s) was stopped, not waited for
    assert done == ["r0"] and not (tmp_path / "r3").exists()
    assert multiprocessing.active_children() == []
    # a run killed on its own (the OOM killer, a kill) is said to be stopped, not to have failed
    assert "r1 was stopped by SIGKILL on its own" in _failure("r1", -9)
    assert "r1 was stopped by SIGTERM on its own" in _failure("r1", 143)
    with pytest.raises(ValueError, match="need jobs >= 1"):
        run_parallel(work, fail_on_config_1, jobs=0, threads=1, on_done=done.append)


def _wait_for(paths: list[Path], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"not all of {paths} appeared"
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_bench_stops_every_run_through_its_handler(tmp_path, signum):
    work = [(f"r{i}", i, tmp_path / f"r{i}", False) for i in range(3)]
    started = [tmp_path / f"r{i}" / "started" for i in range(2)]

    def stop_when_both_sleep(name: str) -> None:
        if name == "r1":  # process-directed, as from `kill`: the waiting main thread takes it
            threading.Thread(
                target=lambda: (_wait_for(started), os.kill(os.getpid(), signum))
            ).start()

    statuses = []
    with pytest.raises(interrupts.Interrupted) as stopped, interrupts.handled():
        run_parallel(
            work, sleep_until_stopped, 2, 1, lambda name: None, stop_when_both_sleep,
            on_status=statuses.append, status_every_s=0.5,
        )  # fmt: skip
    assert stopped.value.signum == signum
    assert statuses and all(names == ["r0", "r1"] for names in statuses)  # while none ended
    for i in range(2):  # each run took the SIGTERM its bench sent as an interrupt
        assert (tmp_path / f"r{i}" / "stopped").read_text() == "SIGTERM"
    assert not (tmp_path / "r2").exists() and multiprocessing.active_children() == []


def test_ctrl_c_to_the_whole_group_stops_the_runs_once(tmp_path):
    # Ctrl-C reaches every process of the terminal's group: the runs ignore it, the bench
    # stops them with SIGTERM and exits 130
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from pathlib import Path\n"
        "from spotlight import interrupts\n"
        "from spotlight.bench_jobs import run_parallel\n"
        "from dist_tests.jobs_helpers import sleep_until_stopped\n"
        f"out = Path({str(tmp_path)!r})\n"
        "work = [(f'r{i}', i, out / f'r{i}', False) for i in range(2)]\n"
        "if __name__ == '__main__':  # a spawned run imports this file again\n"
        "    try:\n"
        "        with interrupts.handled():\n"
        "            run_parallel(work, sleep_until_stopped, 2, 1, lambda name: None)\n"
        "    except interrupts.Interrupted as e:\n"
        "        sys.exit(e.exit_code)\n"
    )
    bench = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    try:
        _wait_for([tmp_path / f"r{i}" / "started" for i in range(2)])
        os.killpg(bench.pid, signal.SIGINT)
        assert bench.wait(timeout=60) == 130
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
    assert [(tmp_path / f"r{i}" / "stopped").read_text() for i in range(2)] == ["SIGTERM"] * 2
