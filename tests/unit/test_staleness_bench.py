"""benchmarks/staleness.py on the tiny smoke recipe: its runs, its report, its reuse."""

import json
import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "staleness.py"


def test_the_staleness_bench_reports_each_arm_and_the_factor(tmp_path, capsys):
    bench = runpy.run_path(str(SCRIPT))
    argv = [
        "--recipe", "tiny-smoke", "--seeds", "0", "--arms", "on_policy", "stale1",
        "--target-delta", "-1", "--iterations", "3", "--val-every", "1",
        "--set", "num_val_seeds=1", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path),
    ]  # fmt: skip
    assert bench["main"](argv) == 0
    doc = json.loads((tmp_path / "staleness-tiny-smoke.json").read_text())
    assert set(doc["arms"]) == {"on_policy", "stale1"} and doc["target_delta"] == -1
    for arm in doc["arms"].values():
        (run,) = arm["runs"]
        # A gain of -1 is reached at the first validation: one iteration.
        assert run["seed"] == 0 and run["iterations_to_target"] == 1
        assert arm["iterations_to_target_mean"] == 1 and arm["reached"] == 1
    assert doc["async_staleness_factor"] == 1.0
    assert doc["command"].startswith("python benchmarks/staleness.py --recipe tiny-smoke")
    assert (tmp_path / "staleness-tiny-smoke.png").stat().st_size > 0
    rows = [json.loads(x) for x in (tmp_path / "runs/stale1-seed0/metrics.jsonl").open()]
    assert rows[0]["rollout_weights_version"] == 0
    capsys.readouterr()
    assert bench["main"](argv) == 0  # finished runs are reused, not run again
    assert "finished, reused" in capsys.readouterr().out

    # The report alone, its run folders gone: --reuse takes its runs of the same config
    import shutil

    report = tmp_path / "report.json"
    shutil.copy(tmp_path / "staleness-tiny-smoke.json", report)
    shutil.rmtree(tmp_path / "runs")
    assert bench["main"]([*argv, "--reuse", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.count(f"reused from {report}") == 2
    again = json.loads((tmp_path / "staleness-tiny-smoke.json").read_text())
    assert again["arms"] == doc["arms"]
    assert not (tmp_path / "runs").exists()  # nothing ran
    # another config is not taken from the report: that run runs
    assert bench["main"]([*argv, "--iterations", "2", "--reuse", str(report)]) == 0
    assert "reused from" not in capsys.readouterr().out
