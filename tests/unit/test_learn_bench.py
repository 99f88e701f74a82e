"""benchmarks/learn.py records each run's command with paths inside the repository relative, and
reuses an earlier report's record only where it ran the same config."""

import json
import runpy
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest

import spotlight.bench

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learn.py"


def test_a_finished_run_is_recorded_with_a_repository_relative_out(monkeypatch, tmp_path):
    monkeypatch.setattr(spotlight.bench, "ROOT", tmp_path)  # tmp_path plays the repository
    run = tmp_path / "runs" / "learn" / "train-0"
    run.mkdir(parents=True)
    summary = {
        "initial_val_reward": 0.2,
        "final_val_reward": 0.3,
        "wall_s": 12.34,
        "num_iterations": 4,
    }
    (run / "summary.json").write_text(json.dumps(summary))  # finished: nothing is run
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 3, "val_reward": 0.3}\n')
    learn = runpy.run_path(str(SCRIPT))
    args = Namespace(recipe="tiny-ocr", runs=str(tmp_path / "runs" / "learn"), iterations=4, set=[])
    record = learn["one_run"](args, 0, "train")
    assert record["command"].startswith(
        "spotlight train --recipe tiny-ocr --runner local --out runs/learn/train-0 "
    )
    assert str(tmp_path) not in record["command"]
    assert record["gain"] == 0.3 - 0.2 and record["wall_s"] == 12.3
    assert record["run"] == "train-0" and record["val_curve"] == [[0, 0.2], [4, 0.3]]


def test_a_reports_record_is_reused_only_for_the_same_config(monkeypatch, tmp_path):
    learn = runpy.run_path(str(SCRIPT))
    args = Namespace(recipe="tiny-ocr", runs=str(tmp_path / "runs"), iterations=4, set=[])
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    config = spotlight.bench.repo_relative(learn["run_config"](args, 1, "control").to_dict())
    record = {"run": "control-1", "gain": 0.01, "val_curve": [[0, 0.2], [4, 0.21]]}
    reuse = {"control-1": {**record, "config": json.loads(json.dumps(config))}}
    assert learn["one_run"](args, 1, "control", reuse) == reuse["control-1"]
    assert ran == []
    # the same name of another config (here: other iterations) is run, not reused
    other = Namespace(**{**vars(args), "iterations": 5})
    with pytest.raises(FileNotFoundError):  # the stubbed run wrote no summary
        learn["one_run"](other, 1, "control", reuse)
    assert len(ran) == 1 and "--iterations" in ran[0][0] and "5" in ran[0][0]
    assert "grpo.shuffle_advantages=true" in ran[0][0]
