"""The ``BanditState`` detached actor: the exploration planner's statistics, persisted.

The planner (exploration issue) reads and updates named statistics here. Every update is written
to a JSON file (atomically) before the call returns, so an actor restarted by Ray (which re-runs
``__init__``) or a new actor created by a restarted driver continues from the same numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import ray


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class BanditState:
    def __init__(self, path: str | None = None):
        self._path = Path(path) if path else None
        self._state: dict[str, Any] = {}
        if self._path is not None and self._path.exists():
            self._state = json.loads(self._path.read_text())

    def get(self, key: str, default: Any = None) -> Any:
        return self._state.get(key, default)

    def snapshot(self) -> dict[str, Any]:
        return dict(self._state)

    def update(self, values: dict[str, Any]) -> None:
        """Merge ``values`` (JSON-serializable) and persist."""
        json.dumps(values)  # refuse what cannot be persisted, before changing anything
        self._state.update(values)
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_name(self._path.name + ".tmp")
            tmp.write_text(json.dumps(self._state, indent=1))
            os.replace(tmp, self._path)

    def path(self) -> str | None:
        return str(self._path) if self._path else None
