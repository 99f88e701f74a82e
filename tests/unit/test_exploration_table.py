"""benchmarks/exploration_table.py: the power bench's run-by-run table in the docs is the one
its report gives."""

import json
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "exploration_table.py"
POWER = ROOT / "docs" / "bench" / "exploration-ocr-mini-exact-power.json"


def test_the_docs_table_is_the_committed_reports():
    table = runpy.run_path(str(SCRIPT))["table"]
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    assert table(json.loads(POWER.read_text())) in docs


def test_rows_go_seed_by_seed_and_say_what_a_run_did_not_do():
    ns = runpy.run_path(str(SCRIPT))
    run = {
        "val_curve": [[0, 0.0, 0.05], [3, 1.0, 0.16]],
        "val_auc": 0.105,
        "iterations_to_target": 3,
        "initial_val_reward": 0.05,
        "zero_std_group_share_first5": 0.5,
        "zero_std_group_share": 0.25,
        "explored_selected_group_std_mean": None,
        "explored_random_group_std_mean": None,
    }
    report = {
        "target_delta": 0.1,
        "val_prompts": 8,
        "val_seeds": 2,
        "modes": {
            "off": {"runs": [{**run, "seed": 1}, {**run, "seed": 0, "iterations_to_target": None}]},
            "spot": {"runs": [{**run, "seed": 0, "explored_selected_group_std_mean": 0.3,
                               "explored_random_group_std_mean": 0.15}]},
        },
    }  # fmt: skip
    lines = ns["table"](report).splitlines()
    assert lines[0].startswith("| mode | seed | validation (8 x 2) | AUC | at +0.10 (0.150) |")
    assert lines[2:] == [
        "| off | 0 | 0.050, 0.160 | 0.105 | - | 50% / 25% | - |",
        "| spot | 0 | 0.050, 0.160 | 0.105 | 3 | 50% / 25% | 0.300 / 0.150 |",
        "| off | 1 | 0.050, 0.160 | 0.105 | 3 | 50% / 25% | - |",
    ]
