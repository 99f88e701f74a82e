"""The run folder: rows appended and truncated on resume, atomic replacement, the summary."""

from __future__ import annotations

import json

import pytest

from spotlight.recipes import get_recipe
from spotlight.training.run_folder import (
    INITIAL_VAL,
    METRICS,
    append_row,
    atomic,
    initial_val_reward,
    last_wall_s,
    status_line,
    summarize,
    truncate_metrics,
    write_json,
)


def _row(it: int, **more) -> dict:
    return {"iteration": it, "wall_s": 10.0 * (it + 1), "train_reward_mean": 0.1 * it, **more}


def test_a_resume_drops_the_rows_it_redoes_and_continues_the_wall_clock(tmp_path):
    path = tmp_path / METRICS
    assert last_wall_s(path) == 0.0  # no file yet
    for it in range(4):
        append_row(path, _row(it))
    truncate_metrics(path, keep_below=2)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    assert last_wall_s(path) == 20.0
    assert not list(tmp_path.glob("*.tmp"))


def test_an_atomic_write_that_fails_leaves_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    write_json(path, {"v": 1})

    def half_written(p):
        p.write_text('{"v": ')
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic(path, half_written)
    assert json.loads(path.read_text()) == {"v": 1}


def test_the_summary_reads_the_rows_and_the_initial_validation(tmp_path):
    cfg = get_recipe("tiny-smoke")
    path = tmp_path / METRICS
    path.touch()
    assert summarize(path, cfg)["stopped"] == "iterations" and initial_val_reward(tmp_path) is None
    write_json(tmp_path / INITIAL_VAL, {"val_reward": 0.2})
    append_row(path, _row(0))
    append_row(path, _row(1, val_reward=0.35, stopped="target"))
    s = summarize(path, cfg)
    assert s["initial_val_reward"] == 0.2 and s["final_val_reward"] == 0.35
    assert s["num_iterations"] == 2 and s["wall_s"] == 20.0 and s["stopped"] == "target"
    assert s["train_reward_first"] == 0.0 and s["train_reward_last"] == 0.1


def test_the_status_line_says_how_far_how_long_and_what_happened():
    rows = [
        {"iteration": i, "wall_s": 30.0 * (i + 1), "seeds_explored": 16, "preemptions": i // 4}
        for i in range(10)
    ]
    rows[3].pop("seeds_explored")  # an iteration that explored nothing has no count
    rows[-1]["items_lost"] = 0
    assert status_line(rows, 40) == (
        "[spotlight] 10/40 iterations, 5m00s elapsed, ETA 15m00s;"
        " preemptions 2, items lost 0; seeds explored 144"
    )
    long = [{"iteration": 99, "wall_s": 3 * 3600 + 61.0}]
    assert "100/300 iterations, 3h01m elapsed, ETA 6h02m;" in status_line(long, 300)
    assert "preemptions 0, items lost 0; seeds explored 0" in status_line(long, 300)
