"""Train functions for the parallel bench's tests: module-level, so a spawned run loads them."""

import time
from pathlib import Path

from spotlight import interrupts


def fail_on_config_1(cfg, run_dir: Path, resume: bool) -> None:
    """Run 0 ends at once, so run 2 starts; run 1 fails once run 2 is going (60 s)."""
    run_dir.mkdir(parents=True)
    if cfg == 1:
        deadline = time.monotonic() + 60
        while not (run_dir.parent / "r2").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        raise RuntimeError("boom")
    if cfg == 2:
        time.sleep(60)


def sleep_until_stopped(cfg, run_dir: Path, resume: bool) -> None:
    """Say it started, sleep; on a stop, say which signal stopped it (a run's checkpoint
    commit stands in here), then let the stop through."""
    run_dir.mkdir(parents=True)
    (run_dir / "started").touch()
    try:
        time.sleep(120)
    except interrupts.Interrupted as e:
        (run_dir / "stopped").write_text(e.name)
        raise
