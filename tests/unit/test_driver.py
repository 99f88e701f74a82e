"""The run driver with a scripted backend: what it asks in which order, what it writes, when it
stops, and how a resume continues."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotlight.recipes import get_recipe
from spotlight.training.driver import drive, open_run_folder


class Scripted:
    """A backend whose rewards are scripted: validation reward 0.1 x the weights version."""

    where = " scripted"
    val_samples = ()

    def __init__(self, out_dir):
        self.out_dir, self.calls, self.saved = out_dir, [], []

    def evaluate(self, it, version):
        self.calls.append(("evaluate", it, version))
        return 0.1 * version

    def iteration(self, it, version):
        self.calls.append(("iteration", it, version))
        row = {"iteration": it, "weights_version": version + 1, "train_reward_mean": 0.5}
        return {**row, "group_reward_std_mean": 0.1, "sample_s": 0.0, "train_s": 0.0}

    def figures(self):
        return {"cost_usd": 1.0, "queue_depth": 0}

    def save_checkpoint(self, done, version):
        self.calls.append(("checkpoint", done, version))
        rows = (self.out_dir / "metrics.jsonl").read_text().splitlines()
        self.saved.append(len(rows))  # the row is written before the commit

    def stopped(self, next_it):
        self.calls.append(("stopped", next_it))

    def finish(self, summary):
        summary["runner"] = "scripted"


def _cfg(**changes):
    cfg = get_recipe("tiny-smoke")
    return dataclasses.replace(cfg, num_iterations=4, val_every=2, **changes)


def _rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_each_iteration_is_run_validated_when_due_written_then_committed(tmp_path):
    cfg = _cfg()
    open_run_folder(cfg, tmp_path, resume=False)
    backend = Scripted(tmp_path)
    summary = drive(cfg, tmp_path, backend, start=0, version=0)
    assert backend.calls == [
        ("evaluate", -1, 0),
        ("iteration", 0, 0), ("checkpoint", 1, 1),
        ("iteration", 1, 1), ("evaluate", 1, 2), ("checkpoint", 2, 2),
        ("iteration", 2, 2), ("checkpoint", 3, 3),
        ("iteration", 3, 3), ("evaluate", 3, 4), ("checkpoint", 4, 4),
    ]  # fmt: skip
    assert backend.saved == [1, 2, 3, 4]
    rows = _rows(tmp_path)
    assert [r.get("val_reward") for r in rows] == [None, pytest.approx(0.2), None, 0.4]
    assert all(r["cost_usd"] == 1.0 and r["wall_s"] >= 0 for r in rows)
    assert json.loads((tmp_path / "val_initial.json").read_text()) == {"val_reward": 0.0}
    assert summary["runner"] == "scripted" and summary["final_val_reward"] == 0.4
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert json.loads((tmp_path / "config.json").read_text()) == cfg.to_dict()


def test_a_run_at_its_target_stops_and_tells_the_backend(tmp_path):
    cfg = _cfg(stop_at_val_gain=0.15)  # 0.2 at the first validation: on target
    backend = Scripted(tmp_path)
    summary = drive(cfg, tmp_path, backend, start=0, version=0)
    assert backend.calls[-1] == ("stopped", 2)
    assert _rows(tmp_path)[-1]["stopped"] == "target" and summary["stopped"] == "target"
    assert summary["num_iterations"] == 2


def test_a_resume_redoes_the_rows_after_the_checkpoint_and_skips_the_first_validation(
    tmp_path,
):
    cfg = _cfg()
    drive(cfg, tmp_path, Scripted(tmp_path), start=0, version=0)
    backend = Scripted(tmp_path)
    drive(cfg, tmp_path, backend, start=2, version=2)  # the checkpoint after 2 iterations
    assert backend.calls[0] == ("iteration", 2, 2)  # no validation before training
    rows = _rows(tmp_path)
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]  # rows 2 and 3 written once
    walls = [r["wall_s"] for r in rows]
    assert walls == sorted(walls)  # the clock continues


def test_a_folder_that_holds_a_run_is_refused_for_a_new_one(tmp_path):
    cfg = _cfg()
    open_run_folder(cfg, tmp_path, resume=False)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        open_run_folder(cfg, tmp_path, resume=False)
    open_run_folder(cfg, tmp_path, resume=True)  # a resume keeps it
