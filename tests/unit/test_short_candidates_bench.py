"""benchmarks/short_candidates.py: k-step candidates screened against the full schedule."""

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "short_candidates.py"


@pytest.fixture(scope="module")
def bench():
    return runpy.run_path(str(SCRIPT))


def test_the_screen_passes_candidates_that_rank_like_the_full_schedule(bench):
    full = [[0.0, 1.0, 0.5, 0.2], [0.0, 0.0, 0.0, 1.0], [0.1, 0.2, 0.3, 0.4]]
    same = {"full": full, "k2": full}
    (row,) = bench["screen"](same, [2], group=2).values()
    assert row["spearman_graded_mean"] == pytest.approx(1.0)
    assert row["rescue_ratio"] == pytest.approx(1.0) and row["passes"]
    # reversed ranks: the short rewards point away from the exact successes
    flipped = {"full": full, "k2": [[1 - x for x in r] for r in full]}
    (row,) = bench["screen"](flipped, [2], group=2).values()
    assert row["spearman_graded_mean"] == pytest.approx(-1.0) and not row["passes"]


def test_the_screen_samples_each_schedule_once_and_reuses_its_scores(bench, tmp_path, capsys):
    argv = [
        "--stale", str(ROOT / "spotlight/assets/ocr-mini.safetensors"), "--steps", "2",
        "--num-prompts", "2", "--num-seeds", "4", "--group", "2", "--out", str(tmp_path),
    ]  # fmt: skip
    assert bench["main"](argv) == 0
    doc = json.loads((tmp_path / "short-candidates-ocr-mini.json").read_text())
    assert set(doc["scores"]) == {"full", "k2"} and doc["full_steps"] == 10
    assert all(len(s) == 2 and all(len(x) == 4 for x in s) for s in doc["scores"].values())
    assert set(doc["screen"]["k2"]) >= {"spearman_graded_mean", "rescued_share", "passes"}
    capsys.readouterr()
    assert bench["main"](argv) == 0
    assert capsys.readouterr().out.count("scores reused") == 2
    with pytest.raises(SystemExit):
        bench["main"](["--stale", str(tmp_path / "missing.safetensors")])
