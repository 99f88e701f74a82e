"""The core imports no Ray: only the Ray shell (job/, actors/, deployments/) may (docs/design.md,
"Pure core, thin Ray shell")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports_ray(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(n == "ray" or n.startswith("ray.") for n in names):
            lines.append(node.lineno)
    return lines


def test_nothing_in_the_core_imports_ray_even_inside_a_function():
    core = sorted(p for d in ("spotlight", "policies") for p in (ROOT / d).rglob("*.py"))
    assert len(core) > 30
    offenders = {p.relative_to(ROOT).as_posix(): lines for p in core if (lines := _imports_ray(p))}
    assert offenders == {}


def test_the_scan_sees_imports_inside_functions():
    src = ROOT / "job" / "trainer.py"
    assert _imports_ray(src), "the Ray shell's trainer imports Ray: the scan must see it"
