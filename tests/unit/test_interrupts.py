"""Ctrl-C and SIGTERM: raised at once, held while a checkpoint is written, one line, 130 / 143."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spotlight import interrupts
from spotlight.cli import main
from spotlight.cli.train import interrupted_line, resume_argv
from spotlight.training.run_folder import read_checkpoint_state

STOP_WITHIN_S = 10.0
"""How soon an interrupted command must have exited."""


def spotlight_process(args: list[str], **popen) -> subprocess.Popen:
    """``spotlight ARGS`` as a process of its own, its output (stdout and stderr) a pipe of
    plain lines."""
    return subprocess.Popen(
        [sys.executable, "-m", "spotlight.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "SPOTLIGHT_PROGRESS": "plain"},
        **popen,
    )


def test_a_signal_raises_at_once_unless_held():
    before = signal.getsignal(signal.SIGINT)  # Python's, or one an earlier test's Ray put there
    with interrupts.handled():
        with pytest.raises(interrupts.Interrupted) as e:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10**6):  # the handler runs between two bytecodes of this loop
                pass
        assert (e.value.name, e.value.exit_code) == ("SIGTERM", 143)
    written = []
    with interrupts.handled():
        with pytest.raises(interrupts.Interrupted) as e, interrupts.held():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**5):
                pass
            written.append("checkpoint")  # the held section finishes
            os.kill(os.getpid(), signal.SIGINT)  # a second signal: still the first's
        assert written == ["checkpoint"] and e.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_the_resume_command_keeps_where_flags_and_drops_what_config_json_keeps():
    argv = ["train", "--recipe", "tiny-smoke", "--set", "a=1", "--set=b=2", "--out", "runs/x"]
    argv += ["--runner", "local", "--iterations=3", "--samplers", "3", "--no-wandb"]
    assert resume_argv(argv, Path("runs/x")) == [
        "train", "--resume", "runs/x", "--runner", "local", "--samplers", "3", "--no-wandb"
    ]  # fmt: skip
    assert resume_argv(["train", "--resume", "r", "--device", "cpu"], Path("r")) == [
        "train", "--resume", "r", "--device", "cpu"
    ]  # fmt: skip


def test_the_interrupted_line_names_the_checkpoint_or_how_to_start_again(tmp_path):
    run = tmp_path / "my run"
    argv = ["train", "--out", str(run), "--runner", "local"]
    first = interrupted_line("SIGINT", run, argv)
    assert first == (
        "spotlight: interrupted (SIGINT) before the first iteration's checkpoint; nothing to"
        f" resume in {run}; start again: spotlight train --out '{run}' --runner local"
    )
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint/state.json").write_text(json.dumps({"iterations_done": 4}))
    assert interrupted_line("SIGTERM", run, argv) == (
        f"spotlight: interrupted (SIGTERM); kept {run}/checkpoint after iteration 4; resume:"
        f" spotlight train --resume '{run}' --runner local"
    )


def interrupt_after_first_iteration(
    args: list[str], sig: int, process_group: bool = False
) -> tuple[int, str, float]:
    """Run ``spotlight`` with ``args``; send ``sig`` once an iteration is done (with
    ``process_group``, to its whole process group, as a terminal's Ctrl-C does). Returns the
    exit code, the whole output and the seconds from the signal to the exit."""
    proc = spotlight_process(args, start_new_session=process_group)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[iter"):
            break
    sent = time.monotonic()
    if process_group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    lines.append(proc.stdout.read())  # to the end: the process has closed its output
    code = proc.wait()  # (no timeout: that would sleep)
    return code, "".join(lines), time.monotonic() - sent


@pytest.mark.slow
def test_ctrl_c_and_sigterm_on_a_local_run_keep_its_checkpoint_and_it_resumes(tmp_path):
    """SIGINT mid-run: exit 130 in seconds, one line with the resume command, no traceback;
    that resume, stopped by SIGTERM, exits 143 the same way; the last resume finishes the run
    with every iteration's row once."""
    run = tmp_path / "run"
    base = ["--runner", "local", "--no-wandb"]
    start = ["train", "--recipe", "tiny-smoke", "--iterations", "4", "--out", str(run), *base]
    resume = ["train", "--resume", str(run), *base]
    for args, sig, code in ((start, signal.SIGINT, 130), (resume, signal.SIGTERM, 143)):
        rc, out, took = interrupt_after_first_iteration(args, sig)
        assert rc == code, out
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
        assert took < STOP_WITHIN_S, (took, out)
        last = out.strip().splitlines()[-1]
        done = read_checkpoint_state(run, "tiny-smoke")["iterations_done"]
        assert done >= 1
        name = signal.Signals(sig).name
        assert last == (
            f"spotlight: interrupted ({name}); kept {run}/checkpoint after iteration {done};"
            f" resume: spotlight train --resume {run} --runner local --no-wandb"
        )
        assert not list((run / "checkpoint").glob("*.tmp"))
    assert main(resume) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_an_interrupted_bench_counts_the_runs_it_keeps_and_prints_its_rerun(tmp_path):
    from argparse import Namespace

    from spotlight.cli.bench import interrupted_line as bench_line

    for name in ("off-seed0", "spot-seed0"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    (tmp_path / "runs/off-seed0/summary.json").write_text("{}")  # spot-seed0 is unfinished
    argv = ["bench", "exploration", "--out", str(tmp_path), "--seeds", "0"]
    args = Namespace(what="exploration", out=str(tmp_path), argv=argv)
    assert bench_line("SIGINT", args) == (
        f"spotlight: interrupted (SIGINT); 1 finished run(s) kept in {tmp_path}/runs (an"
        " unfinished one resumes from its checkpoint); rerun to go on: spotlight bench"
        f" exploration --out {tmp_path} --seeds 0"
    )


def test_ctrl_c_on_simulate_exits_130_with_its_rerun_line(tmp_path):
    args = ["simulate", "--scenario", "small", "--out", str(tmp_path / "sim"), "--workers", "1"]
    proc = spotlight_process(args)
    first = proc.stdout.readline()  # the simulation has started
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    code, took = proc.wait(), time.monotonic() - sent
    out = first + rest
    assert code == 130 and "Traceback" not in out and took < STOP_WITHIN_S, (code, took, out)
    assert out.strip().splitlines()[-1] == (
        f"spotlight: interrupted (SIGINT); {tmp_path}/sim is written only at the end, so nothing"
        f" new is there; rerun: spotlight {' '.join(args)}"
    )


@pytest.mark.slow
def test_sigterm_to_a_pretraining_and_its_loader_worker_commits_the_state(tmp_path):
    """SIGTERM to the whole process group (the loader worker too, as a scheduler's stop or
    ``pkill -f`` sends it): the main process commits the state and exits 143 with one line; a
    worker that died first used to fail the run with a traceback and no commit."""
    out = tmp_path / "pre"
    args = ["pretrain", "--task", "ocr-mini", "--num-samples", "1000000", "--batch-size", "8"]
    args += ["--workers", "1", "--warmup-steps", "1", "--state-every-s", "3600", "--out", str(out)]
    proc = spotlight_process(args, start_new_session=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if " step 100/" in line:
            break
    os.killpg(proc.pid, signal.SIGTERM)
    lines.append(proc.stdout.read())
    code, text = proc.wait(), "".join(lines)
    assert code == 143, text
    assert "Traceback" not in text and "killed by signal" not in text, text
    import torch

    state = torch.load(out / "pretrain-state.pt", map_location="cpu", weights_only=True)
    assert state["step"] >= 100
    assert f"pretraining state kept at {state['step'] * 8} of 1000000 samples" in text
