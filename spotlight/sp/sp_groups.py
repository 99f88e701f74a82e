"""Sequence-parallel group shapes, without Ray or torch.

Ulysses SP splits attention heads across the group, so a group's degree must divide the model's
head count (Qwen-Image: 24 heads, so 1, 2, 3, 4, 6, 8, 12, 24). When a member is lost, the
survivors are re-formed into valid groups: as many of the target degree as fit, the rest into
the largest valid degrees (4 GPUs with one lost -> 2 + 1). The simulator, the per-node
worker scheduler (spotlight/sp/elastic.py) and the sampler replica (deployments/sampler.py:
:func:`group_shape` after a loss or a regrowth, :func:`share_item` for every step) all use these
rules.
"""

from __future__ import annotations


def valid_degrees(num_heads: int, max_degree: int | None = None) -> tuple[int, ...]:
    """SP degrees that divide ``num_heads`` (up to ``max_degree``)."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    top = num_heads if max_degree is None else min(num_heads, max_degree)
    return tuple(d for d in range(1, top + 1) if num_heads % d == 0)


def check_degree(degree: int, num_heads: int) -> None:
    """Refuse an SP degree that does not divide the head count, with the valid ones."""
    if degree < 1 or num_heads % degree:
        raise ValueError(
            f"SP degree {degree} does not divide the model's {num_heads} attention heads;"
            f" valid degrees: {', '.join(map(str, valid_degrees(num_heads)))}"
        )


def form_groups(gpus: int, target: int, valid: tuple[int, ...]) -> list[int]:
    """Split ``gpus`` into SP groups: as many of ``target`` as fit, the rest into the largest
    valid degrees (e.g. 7 GPUs, target 4, valid 1,2,3,4 -> [4, 3])."""
    if target not in valid:
        raise ValueError(f"SP degree {target} is not valid ({valid})")
    sizes = []
    left = gpus
    while left >= target:
        sizes.append(target)
        left -= target
    for d in sorted((v for v in valid if v < target), reverse=True):
        while left >= d:
            sizes.append(d)
            left -= d
    return sizes


def assign(members: list[int], target: int, valid: tuple[int, ...]) -> list[list[int]]:
    """Members (worker ids, in order) grouped as :func:`form_groups` says."""
    out, k = [], 0
    for size in form_groups(len(members), target, valid):
        out.append(members[k : k + size])
        k += size
    return out


def split_work(num_samples: int, group_sizes: list[int]) -> list[int]:
    """How many of an item's ``num_samples`` samples each SP group takes when the groups share
    it (data parallel over groups): in proportion to the group sizes, remainders to the larger
    groups first, then to the earlier ones (10 samples over 2 + 1 + 1 -> [5, 3, 2])."""
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    if not group_sizes or min(group_sizes) < 1:
        raise ValueError(f"group sizes must be >= 1, got {group_sizes}")
    total = sum(group_sizes)
    counts = [num_samples * g // total for g in group_sizes]
    order = sorted(
        range(len(group_sizes)),
        key=lambda i: (-(num_samples * group_sizes[i] % total), -group_sizes[i], i),
    )
    for i in order[: num_samples - sum(counts)]:
        counts[i] += 1
    return counts


def group_shape(members: list[int], degree: int, num_heads: int) -> list[list[int]]:
    """A replica's SP groups over its live workers ``members``: groups of its SP ``degree``,
    the rest in the largest valid smaller ones (a 4-head model: 8 workers at SP 4 -> 4 + 4,
    7 -> 4 + 2 + 1, 3 -> 2 + 1)."""
    if not members:
        raise ValueError("no SP workers to group")
    valid = valid_degrees(num_heads)
    target = max(d for d in valid if d <= min(len(members), degree))
    return assign(members, target, valid)


def share_item(num_samples: int, groups: list[list[int]]) -> list[tuple[list[int], slice]]:
    """Which of an item's samples each SP group takes (:func:`split_work`, in group order):
    ``(group, slice of the item's samples)`` for every group that gets at least one."""
    counts = split_work(num_samples, [len(g) for g in groups])
    out, lo = [], 0
    for group, n in zip(groups, counts, strict=True):
        if n:
            out.append((group, slice(lo, lo + n)))
            lo += n
    return out
