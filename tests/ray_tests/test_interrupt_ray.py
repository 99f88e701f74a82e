"""Ctrl-C on a run of the Ray job that started its own local Ray: it stops in seconds, keeps
its last checkpoint, prints one line with the ``--resume`` command and no traceback."""

from __future__ import annotations

import signal

import pytest
from unit.test_interrupts import interrupt_after_first_iteration

from spotlight.training.run_folder import read_checkpoint_state

pytestmark = pytest.mark.slow

RAY_STOP_WITHIN_S = 45.0
"""A Ray run's stop takes its Serve app and Ray Train down: 3.1 s alone on 2 cores, 23.9 s in
the suite while another test's Ray cluster shared them. A stop that hangs on Ray's own
shutdown waits takes minutes, and fails this."""


def test_ctrl_c_on_a_ray_run_exits_130_with_the_resume_line(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--recipe", "tiny-smoke", "--iterations", "6", "--out", str(run)]
    args += ["--runner", "ray", "--samplers", "1", "--no-wandb"]
    code, out, took = interrupt_after_first_iteration(args, signal.SIGINT, process_group=True)
    assert code == 130, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert took < RAY_STOP_WITHIN_S, (took, out[-3000:])
    done = read_checkpoint_state(run, "tiny-smoke")["iterations_done"]
    assert 1 <= done < 6
    assert out.strip().splitlines()[-1] == (
        f"spotlight: interrupted (SIGINT); kept {run}/checkpoint after iteration {done};"
        f" resume: spotlight train --resume {run} --runner ray --samplers 1 --no-wandb"
    )
