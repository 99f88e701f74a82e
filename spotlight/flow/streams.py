"""The run's random streams: every random draw of an iteration comes from one named stream.

A draw is ``iteration_rng(cfg.seed, iteration, STREAM, *more)``: independent of every other
stream and iteration, and the same in both runners, on any machine, after any restart.
"""

from __future__ import annotations

import numpy as np

SEED_SPACE = 2**31 - 1
"""Sample, update and candidate seeds are drawn from ``[0, SEED_SPACE)``."""

BATCH_STREAM = 0
"""An iteration's prompts and their sample seeds (spotlight.training.loop.iteration_batch)."""
UPDATE_STREAM = 1
"""The seed of an iteration's update: timestep subset, chunk order
(spotlight.training.loop.update_seed)."""
EXPLORE_STREAM = 2
"""Candidate seeds of an iteration's exploration, one sub-stream per prompt
(spotlight.explore.exploration.candidate_seeds)."""
SHUFFLE_STREAM = 3
"""The control runs' advantage permutation (spotlight.training.loop.score_groups)."""


def iteration_rng(seed: int, iteration: int, stream: int, *more: int) -> np.random.Generator:
    """Independent random stream ``stream`` of iteration ``iteration`` (``more``: sub-streams)."""
    return np.random.default_rng([seed, iteration, stream, *more])
