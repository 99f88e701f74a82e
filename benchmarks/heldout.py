"""A run's gain on the validation prompts and seeds it never validated on, from two eval.json files.

python benchmarks/heldout.py --base docs/bench/eval-ocr-mini-base.json \\
    --run runs/default-eval/eval.json --out docs/bench/heldout-default-run.json

Both files are ``spotlight eval --num-seeds 8`` on all of a task's validation prompts: the base
model and the run's final checkpoint. A ``tiny-ocr`` run validates on the first 128 of OCR-mini's
256 prompts x seeds 0-3 (the defaults of ``--validated-prompts`` and ``--validated-seeds``); a
``tiny-geneval`` run on all 84 of GenEval-mini's x seeds 0-3 (``--validated-prompts 84``). The
regions are those (``validated``, which should equal the run's own final validation), the
other prompts x all seeds (``other_prompts``), the validated prompts x the other seeds
(``other_seeds``), the other prompts x the other seeds (``neither``) and everything (``all``);
a region with no prompt or no seed is left out. Each gives the base's mean reward, the run's
and the gain. With ``--train-base`` and ``--train-run`` (the same two checkpoints scored by
``spotlight eval --split train``), a ``train_prompts`` region gives the gain on the prompts the
run trained on, beside the gains on prompts it never saw.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

VALIDATED_PROMPTS = 128  # the tiny-ocr recipe's num_val_prompts
VALIDATED_SEEDS = 4  # its num_val_seeds


def regions(
    validated_prompts: int, validated_seeds: int, num_prompts: int, num_seeds: int
) -> dict[str, tuple[int, int | None, int, int | None]]:
    """name: (first prompt, end prompt, first seed, end seed), None for the end; the regions
    with at least one prompt and one seed."""
    p, s = validated_prompts, validated_seeds
    every = {
        "validated": (0, p, 0, s),
        "other_prompts": (p, None, 0, None),
        "other_seeds": (0, p, s, None),
        "neither": (p, None, s, None),
        "all": (0, None, 0, None),
    }
    return {
        name: r
        for name, r in every.items()
        if min(r[1] or num_prompts, num_prompts) > r[0] and min(r[3] or num_seeds, num_seeds) > r[2]
    }


def region_mean(doc: dict, region: tuple[int, int | None, int, int | None]) -> float:
    """The mean reward over a region's prompts and seeds of one eval.json."""
    p0, p1, s0, s1 = region
    rows = doc["per_prompt"][p0:p1]
    return statistics.fmean(r for row in rows for r in row["rewards"][s0:s1])


def check_same_items(base: dict, run: dict) -> None:
    """Two eval files score the same prompts with the same seeds, or a ValueError."""
    if [r["prompt"] for r in base["per_prompt"]] != [r["prompt"] for r in run["per_prompt"]]:
        raise ValueError("the two eval files score different prompts")
    if base["num_seeds"] != run["num_seeds"]:
        raise ValueError("the two eval files score different numbers of seeds")


def heldout(
    base: dict,
    run: dict,
    validated_prompts: int = VALIDATED_PROMPTS,
    validated_seeds: int = VALIDATED_SEEDS,
) -> dict:
    """Each region's base mean, run mean and gain (the two evals must score the same items)."""
    check_same_items(base, run)
    out = {}
    n_prompts, n_seeds = len(base["per_prompt"]), base["num_seeds"]
    for name, region in regions(validated_prompts, validated_seeds, n_prompts, n_seeds).items():
        b, r = region_mean(base, region), region_mean(run, region)
        p0, p1, s0, s1 = region
        out[name] = {
            "prompts": [p0, (p1 or len(base["per_prompt"])) - 1],
            "seeds": [s0, (s1 or base["num_seeds"]) - 1],
            "base": b,
            "run": r,
            "gain": r - b,
        }
    return out


def train_prompts(base: dict, run: dict) -> dict:
    """The ``train_prompts`` region: every prompt and seed of two ``--split train`` evals."""
    for doc in (base, run):
        if doc.get("split") != "train":
            raise ValueError(f"{doc['checkpoint']}: not an eval of the training prompts")
    check_same_items(base, run)
    b, r = region_mean(base, (0, None, 0, None)), region_mean(run, (0, None, 0, None))
    n_prompts = len(base["per_prompt"])
    seeds = [0, base["num_seeds"] - 1]
    return {"prompts": [0, n_prompts - 1], "seeds": seeds, "base": b, "run": r, "gain": r - b}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the base model's eval.json")
    parser.add_argument("--run", type=Path, required=True, help="the run's eval.json")
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write")
    parser.add_argument(
        "--validated-prompts",
        type=int,
        default=VALIDATED_PROMPTS,
        help="how many of the first prompts the run validated on (tiny-ocr: 128)",
    )
    parser.add_argument(
        "--validated-seeds", type=int, default=VALIDATED_SEEDS, help="and on seeds 0..N-1"
    )
    parser.add_argument("--train-base", type=Path, help="the base's eval.json of --split train")
    parser.add_argument("--train-run", type=Path, help="the run's eval.json of --split train")
    args = parser.parse_args(argv)
    if (args.train_base is None) != (args.train_run is None):
        print("heldout.py: --train-base and --train-run go together", file=sys.stderr)
        return 2
    for path in (args.base, args.run, args.train_base, args.train_run):
        if path is None:
            continue
        if not path.is_file():
            print(f"heldout.py: {path}: no such file", file=sys.stderr)
            return 2
    base, run = (json.loads(p.read_text()) for p in (args.base, args.run))
    doc = {
        "base_checkpoint": base["checkpoint"],
        "run_checkpoint": run["checkpoint"],
        "num_prompts": base["num_prompts"],
        "num_seeds": base["num_seeds"],
        "regions": heldout(base, run, args.validated_prompts, args.validated_seeds),
    }
    if args.train_base is not None:
        train = [json.loads(p.read_text()) for p in (args.train_base, args.train_run)]
        doc["regions"]["train_prompts"] = train_prompts(*train)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, r in doc["regions"].items():
        print(f"{name:14s} base {r['base']:.3f} run {r['run']:.3f} gain {r['gain']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
