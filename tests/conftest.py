"""Shared test setup: quiet Ray, few threads (CI has 2 cores)."""

import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "offline")
