"""The invariants a run under faults must keep, checked against the same run without faults.

A run struck by faults (``spotlight.scheduling.chaos``) must end where the fault-free run ends:
the same metrics rows once the keys that measure time or count faults are set aside, the same
final tensors bit for bit, every iteration trained once, no item lost. The checks here read
what both runs wrote (rows as dicts, tensors as dicts); they return what differs, so a report
can name it, instead of stopping at the first difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spotlight.training.run_folder import FAULT_COUNTERS

RUN_FIGURES = frozenset(
    {
        *FAULT_COUNTERS,
        "queue_depth",
        "replicas",
        "cost_usd",
        "util_spot",
        "util_on_demand",
        "gpu_s_spot",
        "gpu_s_on_demand",
        "busy_gpu_s_spot",
        "busy_gpu_s_on_demand",
    }
)
"""Row keys of a run's cost, fault counters and queue state: they differ under faults."""


def is_timing_key(key: str) -> bool:
    """A row key that measures time or a rate (``sample_s``, ``wall_s``, ``samples_per_s``,
    ``weights_load_s_max``) or a figure of the run itself (:data:`RUN_FIGURES`)."""
    return (
        key in RUN_FIGURES or key.endswith("_s") or "_s_" in key or "per_s" in key or "rate" in key
    )


def row_differences(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> list[str]:
    """Where ``got``'s rows differ from ``want``'s: the same iterations in the same order, and
    in each row every key of ``want``'s that is not a timing key with the same value (floats
    compared exactly: a JSON round trip keeps every bit). ``got`` may have more keys (a Ray
    run's against the local runner's)."""
    found = []
    its_got, its_want = [r.get("iteration") for r in got], [r.get("iteration") for r in want]
    if its_got != its_want:
        return [f"iterations {its_got} != {its_want}"]
    for g, w in zip(got, want, strict=True):
        for key, value in w.items():
            if is_timing_key(key):
                continue
            if key not in g:
                found.append(f"iteration {w['iteration']}: {key!r} missing")
            elif g[key] != value:
                found.append(f"iteration {w['iteration']}: {key} {g[key]!r} != {value!r}")
    return found


def tensor_differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Names of the tensors that differ (absent on one side, or not bit-equal: dtype, shape or
    any value)."""
    import torch

    found = [f"{k}: missing" for k in sorted(want.keys() - got.keys())]
    found += [f"{k}: not expected" for k in sorted(got.keys() - want.keys())]
    for k in sorted(want.keys() & got.keys()):
        a, b = got[k], want[k]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            found.append(f"{k}: differs")
    return found


@dataclass(frozen=True)
class Accounting:
    """What the rows of a finished run say about its items and updates."""

    items_lost: int
    """Work items whose result never came (the queue's counter in the last row)."""
    items_trained_twice: int
    """Samples of iterations trained more than once: a second row for an iteration, or a row
    whose weights version is not ``iteration + 1`` (an update applied twice or skipped)."""
    iterations_missing: list[int]


def accounting(rows: list[dict[str, Any]], num_iterations: int) -> Accounting:
    """:class:`Accounting` of ``rows`` (a finished run's ``metrics.jsonl``) for a run of
    ``num_iterations``: each iteration once, on weights ``iteration + 1``."""
    seen: dict[int, int] = {}
    twice = 0
    for r in rows:
        it = r["iteration"]
        seen[it] = seen.get(it, 0) + 1
        if seen[it] > 1 or r["weights_version"] != it + 1:
            twice += r.get("num_samples", 0)
    missing = [it for it in range(num_iterations) if it not in seen]
    lost = rows[-1].get("items_lost", 0) if rows else 0
    return Accounting(lost, twice, missing)
