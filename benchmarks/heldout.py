"""A run's gain on the validation prompts and seeds it never validated on, from two eval.json files.

python benchmarks/heldout.py --base docs/bench/eval-ocr-mini-base.json \\
    --run runs/default-eval/eval.json --out docs/bench/heldout-default-run.json

Both files are ``spotlight eval --num-seeds 8`` on all 256 OCR-mini validation prompts: the base
model and the run's final checkpoint. A ``tiny-ocr`` run validates on the first 128 prompts x
seeds 0-3; the regions are those (``validated``, which should equal the run's own final
validation), the other 128 prompts x all 8 seeds (``other_prompts``), the validated prompts x
seeds 4-7 (``other_seeds``), the other prompts x seeds 4-7 (``neither``) and everything
(``all``). Each region gives the base's mean reward, the run's and the gain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

VALIDATED_PROMPTS = 128  # the tiny-ocr recipe's num_val_prompts
VALIDATED_SEEDS = 4  # its num_val_seeds
REGIONS = {  # name: (first prompt, end prompt, first seed, end seed); None: to the end
    "validated": (0, VALIDATED_PROMPTS, 0, VALIDATED_SEEDS),
    "other_prompts": (VALIDATED_PROMPTS, None, 0, None),
    "other_seeds": (0, VALIDATED_PROMPTS, VALIDATED_SEEDS, None),
    "neither": (VALIDATED_PROMPTS, None, VALIDATED_SEEDS, None),
    "all": (0, None, 0, None),
}


def region_mean(doc: dict, region: tuple[int, int | None, int, int | None]) -> float:
    """The mean reward over a region's prompts and seeds of one eval.json."""
    p0, p1, s0, s1 = region
    rows = doc["per_prompt"][p0:p1]
    return statistics.fmean(r for row in rows for r in row["rewards"][s0:s1])


def heldout(base: dict, run: dict) -> dict:
    """Each region's base mean, run mean and gain (the two evals must score the same items)."""
    if [r["prompt"] for r in base["per_prompt"]] != [r["prompt"] for r in run["per_prompt"]]:
        raise ValueError("the two eval files score different prompts")
    if base["num_seeds"] != run["num_seeds"]:
        raise ValueError("the two eval files score different numbers of seeds")
    out = {}
    for name, region in REGIONS.items():
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the base model's eval.json")
    parser.add_argument("--run", type=Path, required=True, help="the run's eval.json")
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = parser.parse_args(argv)
    for path in (args.base, args.run):
        if not path.is_file():
            print(f"heldout.py: {path}: no such file", file=sys.stderr)
            return 2
    base, run = (json.loads(p.read_text()) for p in (args.base, args.run))
    doc = {
        "base_checkpoint": base["checkpoint"],
        "run_checkpoint": run["checkpoint"],
        "num_prompts": base["num_prompts"],
        "num_seeds": base["num_seeds"],
        "regions": heldout(base, run),
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, r in doc["regions"].items():
        print(f"{name:14s} base {r['base']:.3f} run {r['run']:.3f} gain {r['gain']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
