"""benchmarks/learn.py records each run's command with paths inside the repository relative."""

import json
import runpy
from argparse import Namespace
from pathlib import Path

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
    learn = runpy.run_path(str(SCRIPT))
    args = Namespace(recipe="tiny-ocr", runs=str(tmp_path / "runs" / "learn"), iterations=4, set=[])
    record = learn["one_run"](args, 0, "train")
    assert record["command"].startswith(
        "spotlight train --recipe tiny-ocr --runner local --out runs/learn/train-0 "
    )
    assert str(tmp_path) not in record["command"]
    assert record["gain"] == 0.3 - 0.2 and record["wall_s"] == 12.3
