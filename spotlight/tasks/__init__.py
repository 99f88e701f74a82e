"""Tasks: prompt sets, ground-truth renderers and the reward that scores each."""

from __future__ import annotations

from pathlib import Path

from spotlight.tasks.base import Task

ASSETS = Path(__file__).resolve().parent.parent / "assets"

TASK_NAMES = ("ocr-mini", "geneval-mini")


def get_task(name: str) -> Task:
    """The task called ``name``."""
    if name == "ocr-mini":
        from spotlight.tasks.ocr_mini import OcrMini

        return OcrMini()
    if name == "geneval-mini":
        from spotlight.tasks.geneval_mini import GenEvalMini

        return GenEvalMini()
    raise ValueError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}")


def base_checkpoint(name: str) -> str:
    """Path of the tiny base model shipped for task ``name`` (docs/tasks.md: how it was made)."""
    get_task(name)
    return str(ASSETS / f"{name}.safetensors")


def check_checkpoint_task(checkpoint: str | Path, name: str) -> None:
    """Refuse a tiny-policy checkpoint that draws other images than task ``name`` scores
    (read from the file's header, before any model is built).

    Raises:
        ValueError: the file is not a tiny-policy checkpoint, or its images are another
            shape than the task's (naming the task whose shape it has).
    """
    from spotlight.policies.tiny import checkpoint_config

    def shape(path) -> tuple[int, int, int]:
        c = checkpoint_config(path)
        return (c.height, c.width, c.channels)

    have, want = shape(checkpoint), shape(base_checkpoint(name))
    if have != want:
        other = [t for t in TASK_NAMES if t != name and shape(base_checkpoint(t)) == have]
        what = f"an {other[0]} model" if other else "no task's model"
        raise ValueError(
            f"{checkpoint} draws {have[0]}x{have[1]}x{have[2]} images ({what}); task {name}"
            f" scores {want[0]}x{want[1]}x{want[2]}"
        )


__all__ = ["TASK_NAMES", "Task", "base_checkpoint", "check_checkpoint_task", "get_task"]
