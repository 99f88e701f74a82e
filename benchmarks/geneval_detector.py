"""Validate the GenEval-mini detector on ground-truth renders: agreement, negatives, failures.

python benchmarks/geneval_detector.py --num 5000                  # prints the tables
python benchmarks/geneval_detector.py --num 200 --grid /tmp/geneval_grid.png

Agreement: the share of rendered scenes the detector scores correct for their own prompt.
Negatives: each scene scored against another prompt of its category that asks for a different
scene (not a mere reordering); the share scored incorrect. Robustness: agreement on renders
with Gaussian pixel noise or a 3x3 box blur, a rough stand-in for generated images.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from spotlight.rewards.geneval import detect, score
from spotlight.tasks.geneval_mini import (
    CATEGORIES,
    GenEvalMini,
    all_specs,
    format_prompt,
    meaning,
    parse,
)

Case = tuple[str, int]
"""(prompt, render seed)."""


@functools.lru_cache(maxsize=1)
def by_category() -> dict[str, list[str]]:
    """The whole prompt space (train and val) grouped by category."""
    groups: dict[str, list[str]] = defaultdict(list)
    for spec in all_specs():
        groups[spec.category].append(format_prompt(spec))
    return groups


def sample_cases(num: int, seed: int) -> list[Case]:
    """``num`` (prompt, seed) pairs: a uniform category, then a uniform prompt in it."""
    rng = np.random.default_rng(seed)
    groups = by_category()
    cases = []
    for i in range(num):
        group = groups[CATEGORIES[int(rng.integers(len(CATEGORIES)))]]
        cases.append((group[int(rng.integers(len(group)))], seed * 1_000_003 + i))
    return cases


def render(case: Case) -> np.ndarray:
    """The ground-truth image of a case."""
    prompt, seed = case
    return GenEvalMini().render(prompt, np.random.default_rng(seed))


@functools.cache
def different_scenes(prompt: str) -> list[str]:
    """The prompts of ``prompt``'s category that ask for a different scene."""
    key = meaning(parse(prompt))
    return [p for p in by_category()[parse(prompt).category] if meaning(parse(p)) != key]


def other_prompt(prompt: str, rng: np.random.Generator) -> str:
    """A random prompt of the same category that asks for a different scene."""
    others = different_scenes(prompt)
    return others[int(rng.integers(len(others)))]


def noisy(image: np.ndarray, rng: np.random.Generator, sigma: float = 24.0) -> np.ndarray:
    """``image`` plus Gaussian noise of std ``sigma`` per channel, clipped to uint8."""
    out = image.astype(np.float32) + rng.normal(0.0, sigma, image.shape)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def blurred(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A 3x3 box blur of ``image`` (edge-replicated); ``rng`` unused."""
    p = np.pad(image.astype(np.float32), ((1, 1), (1, 1), (0, 0)), mode="edge")
    h, w = image.shape[:2]
    out = sum(p[dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3)) / 9.0
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


Perturb = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def agreement(
    cases: list[Case], perturb: Perturb | None = None
) -> tuple[dict[str, list[bool]], list[tuple[float, str, int]]]:
    """Per-category correctness of each case against its own prompt, and the failures."""
    results: dict[str, list[bool]] = defaultdict(list)
    failures = []
    rng = np.random.default_rng(0)
    for case in cases:
        image = render(case)
        if perturb is not None:
            image = perturb(image, rng)
        correct, partial = score(image, case[0])
        results[parse(case[0]).category].append(correct)
        if not correct:
            failures.append((partial, *case))
    return results, sorted(failures)


def negatives(cases: list[Case]) -> dict[str, list[bool]]:
    """Per category: whether each scene is scored incorrect against a different prompt."""
    rng = np.random.default_rng(1)
    results: dict[str, list[bool]] = defaultdict(list)
    for case in cases:
        wrong = other_prompt(case[0], rng)
        results[parse(case[0]).category].append(not score(render(case), wrong)[0])
    return results


def table(title: str, results: dict[str, list[bool]]) -> None:
    """Print overall and per-category rates."""
    total = [x for cat in CATEGORIES for x in results.get(cat, [])]
    print(f"{title}: {np.mean(total):.2%} of {len(total)}")
    for cat in CATEGORIES:
        r = results.get(cat, [])
        print(f"  {cat:<14} {np.mean(r) if r else float('nan'):8.2%}  ({sum(r)}/{len(r)})")


def save_grid(cases: list[Case], path: str, scale: int = 6, cols: int = 6) -> None:
    """Save the renders of ``cases`` upscaled, each with its prompt and detections below."""
    font = ImageFont.load_default(size=11)
    cell_w, img_px, text_h = 32 * scale + 24, 32 * scale, 50
    rows = (len(cases) + cols - 1) // cols
    grid = Image.new("RGB", (cols * cell_w, rows * (img_px + text_h)), (128, 128, 128))
    draw = ImageDraw.Draw(grid)
    for k, case in enumerate(cases):
        x, y = (k % cols) * cell_w + 12, (k // cols) * (img_px + text_h)
        image = render(case)
        big = Image.fromarray(image).resize((img_px, img_px), Image.Resampling.NEAREST)
        grid.paste(big, (x, y + 2))
        body = case[0].removeprefix("a photo of ")
        shapes = ",".join(f"{d.color[0]}{d.shape[:3]}" for d in detect(image))
        verdict = "OK" if score(image, case[0])[0] else "FAIL"
        cut = body.rfind(" ", 0, 35) if len(body) > 34 else len(body)
        lines = [body[:cut], body[cut + 1 :], f"{verdict}: {shapes}"]
        draw.multiline_text((x, y + img_px + 3), "\n".join(lines), fill=(0, 0, 0), font=font)
    grid.save(path)
    print(f"saved {len(cases)} scenes to {path}")


def main() -> None:
    """Parse arguments, run the checks and print the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=5000, help="scenes to render and score")
    ap.add_argument("--seed", type=int, default=0, help="seeds the cases")
    ap.add_argument("--worst", type=int, default=10, help="failures to list")
    ap.add_argument("--grid", default=None, help="also save a PNG grid of 4 cases per category")
    args = ap.parse_args()
    cases = sample_cases(args.num, args.seed)
    t0 = time.perf_counter()
    results, failures = agreement(cases)
    dt = time.perf_counter() - t0
    table("agreement (ground truth scored correct)", results)
    print(f"  ({dt / len(cases) * 1e3:.2f} ms per scene: render + detect + score)")
    table("negatives (different prompt, same category, scored incorrect)", negatives(cases))
    for name, fn in (("noise sigma=24", noisy), ("3x3 box blur", blurred)):
        table(f"robustness, {name}", agreement(cases, fn)[0])
    print(f"worst failures ({len(failures)} in all):")
    for partial, prompt, seed in failures[: args.worst]:
        found = [(d.shape, d.color, d.area) for d in detect(render((prompt, seed)))]
        print(f"  partial={partial:.2f} seed={seed} {prompt!r}: {found}")
    if args.grid:
        per_cat = [[c for c in cases if parse(c[0]).category == cat][:4] for cat in CATEGORIES]
        save_grid([c for group in per_cat for c in group], args.grid)


if __name__ == "__main__":
    main()
