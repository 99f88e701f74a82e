"""benchmarks/figures.py: every registered figure in the docs matches its JSON, and a number
changed by hand in a doc fails the check, naming the file, the sentence and both values."""

import json
import runpy
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = runpy.run_path(str(ROOT / "benchmarks" / "figures.py"))
HELDOUT = runpy.run_path(str(ROOT / "benchmarks" / "heldout.py"))


@pytest.fixture
def tree(tmp_path):
    """A copy of the README and docs/ (Markdown and JSON) to edit by hand."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("which", ["quick", "all"])
def test_the_docs_figures_match_their_json(which, capsys):
    assert FIGURES["main"](["--check", "--set", which]) == 0, capsys.readouterr().out


def test_a_number_changed_by_hand_fails_naming_file_sentence_and_both_values(tree, capsys):
    _edit(tree / "README.md", "14 runs, 1.04-1.55x)", "14 runs, 1.04-1.56x)")
    assert FIGURES["main"](["--check", "--set", "quick", "--root", str(tree)]) == 1
    out = capsys.readouterr().out
    line = next(
        i for i, t in enumerate((tree / "README.md").read_text().splitlines(), 1) if "1.56x" in t
    )
    assert f"README.md:{line}: hi: the doc says 1.56, docs/sim/windows/windows.json" in out
    assert "gives 1.55" in out
    assert "sentence: " in out and "faster than every baseline on the same 16 on-demand GPUs" in out
    assert "1 failure(s)" in out


def test_a_number_in_a_wrapped_sentence_of_another_doc_fails_too(tree, capsys):
    _edit(tree / "docs" / "usage.md", "had 1.38x the reward std", "had 1.37x the reward std")
    assert FIGURES["main"](["--check", "--set", "long", "--root", str(tree)]) == 1
    out = capsys.readouterr().out
    assert "docs/usage.md:" in out and "ratio: the doc says 1.37" in out and "gives 1.38" in out
    assert "the 8 the planner kept had 1.37x the reward std" in out


def test_a_timing_passes_within_its_tolerance_and_fails_beyond(tree, capsys):
    readme = tree / "README.md"
    _edit(readme, "| 0.042 s against", "| 0.050 s against")  # within its rtol of 0.5
    assert FIGURES["main"](["--check", "--set", "quick", "--root", str(tree)]) == 0
    _edit(readme, "| 0.050 s against", "| 0.090 s against")
    assert FIGURES["main"](["--check", "--set", "quick", "--root", str(tree)]) == 1
    out = capsys.readouterr().out
    assert "regroup: the doc says 0.090" in out and "(allowed difference" in out


def test_a_reworded_quote_fails_naming_it(tree, capsys):
    _edit(tree / "README.md", "item committed and handed back", "item committed, handed back")
    assert FIGURES["main"](["--check", "--set", "quick", "--root", str(tree)]) == 1
    out = capsys.readouterr().out
    assert "README.md: the quote is not in the file" in out
    assert "item committed and handed back {median} s" in out


def test_a_json_that_moved_fails_naming_it(tree, capsys):
    (tree / "docs" / "bench" / "preemption.json").unlink()
    assert FIGURES["main"](["--check", "--set", "quick", "--root", str(tree)]) == 1
    assert "cannot read 'notice.notice_to_committed_s_median' from docs/bench/preemption.json" in (
        capsys.readouterr().out
    )


def test_commands_narrow_the_check_to_their_figures(tree, capsys):
    _edit(tree / "README.md", "all 20 recovered (median", "all 21 recovered (median")
    root = ["--root", str(tree)]
    assert FIGURES["main"](["--check", "--command", "default-run", "soak", *root]) == 0
    out = capsys.readouterr().out
    assert "of command(s) default-run, soak: 0 failure(s)" in out
    assert FIGURES["main"](["--check", "--command", "chaos", *root]) == 1
    assert "recovered: the doc says 21" in capsys.readouterr().out
    assert FIGURES["main"](["--list", "--set", "quick"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed and all(" (quick): " in line for line in listed)
    with pytest.raises(SystemExit):  # an unknown name is refused before anything runs
        FIGURES["main"](["--regenerate", "--command", "no-such-command"])
    assert "no command no-such-command; known: sim-windows" in capsys.readouterr().err


def test_a_failed_command_stops_the_regenerate_naming_it_and_what_was_not_run(tmp_path):
    ran = tmp_path / "ran"
    reg = {
        "commands": {
            "first": {"set": "long", "run": f"echo 1 >> {ran}"},
            "broken": {"set": "long", "run": "exit 3"},
            "after": {"set": "long", "run": f"echo 2 >> {ran}"},
            "later": {"set": "long", "run": f"echo 3 >> {ran}"},
        }
    }
    line = FIGURES["regenerate"](reg, "long")
    assert line == "[figures] broken failed (exit 3; its output is above); not run: after, later"
    assert ran.read_text() == "1\n"
    assert FIGURES["regenerate"](reg, "long", ["first", "after"]) is None
    assert ran.read_text() == "1\n1\n2\n"


def test_quotes_match_across_line_breaks_and_read_only_named_numbers():
    regex, names = FIGURES["quote_regex"]("went {a} -> **{b}** in {_} iterations")
    match = regex.search("it went 0.218 ->\n**0.335** in 40 iterations")
    assert names == ["a", "b"] and match.groups() == ("0.218", "0.335")


def test_paths_filter_map_and_aggregate():
    data = {
        "runs": [
            {"mode": "train", "g": 0.1},
            {"mode": "control", "g": -0.2},
            {"mode": "train", "g": None},
        ]
    }
    read = FIGURES["read_path"]
    assert read(data, "runs.[mode=train].g") == [0.1, None]
    assert read(data, "runs.[mode=control].0.g") == -0.2
    assert read(data, "runs.*.mode") == ["train", "control", "train"]
    spec = {"path": "runs.*.g", "agg": "min"}
    assert FIGURES["AGGREGATES"]["count"]([1, 2]) == 2
    assert [v for v in read(data, spec["path"]) if v is not None] == [0.1, -0.2]


def test_every_figure_names_a_command_of_a_known_set():
    reg = FIGURES["load_registry"]()
    sets = {cmd["set"] for cmd in reg["commands"].values()}
    assert sets == {"quick", "long"}
    assert all(fig["command"] in reg["commands"] for fig in reg["figures"])
    for fig in reg["figures"]:
        _, names = FIGURES["quote_regex"](fig["quote"])
        assert names and sorted(names) == sorted(fig["values"]), fig["quote"]


def _eval_doc(rewards: list[list[float]]) -> dict:
    return {
        "checkpoint": "x",
        "num_prompts": len(rewards),
        "num_seeds": len(rewards[0]),
        "per_prompt": [{"prompt": f"p{i}", "rewards": r} for i, r in enumerate(rewards)],
    }


def test_heldout_regions():
    base = _eval_doc([[0.0, 0.0], [0.0, 1.0]])
    run = _eval_doc([[1.0, 0.5], [0.5, 1.0]])
    out = HELDOUT["heldout"](base, run, validated_prompts=1, validated_seeds=1)
    assert out["validated"] == {
        "prompts": [0, 0],
        "seeds": [0, 0],
        "base": 0.0,
        "run": 1.0,
        "gain": 1.0,
    }
    assert out["other_prompts"]["gain"] == pytest.approx(0.25)
    assert out["other_seeds"]["run"] == 0.5
    assert out["neither"]["gain"] == 0.0 and out["all"]["gain"] == pytest.approx(0.5)
    # a run that validated on every prompt: only its other seeds are held out
    every = HELDOUT["heldout"](base, run, validated_prompts=2, validated_seeds=1)
    assert list(every) == ["validated", "other_seeds", "all"]
    assert every["other_seeds"]["prompts"] == [0, 1] and every["other_seeds"]["gain"] == 0.25
    other = json.loads(json.dumps(run))
    other["per_prompt"][1]["prompt"] = "q"
    with pytest.raises(ValueError, match="different prompts"):
        HELDOUT["heldout"](base, other)


def test_heldout_training_prompts_region():
    base = {**_eval_doc([[0.0, 0.5], [0.5, 0.0]]), "split": "train"}
    run = {**_eval_doc([[1.0, 0.5], [0.5, 1.0]]), "split": "train"}
    out = HELDOUT["train_prompts"](base, run)
    assert out == {"prompts": [0, 1], "seeds": [0, 1], "base": 0.25, "run": 0.75, "gain": 0.5}
    with pytest.raises(ValueError, match="not an eval of the training prompts"):
        HELDOUT["train_prompts"](_eval_doc([[0.0]]), run)
