"""The package map of docs/design.md holds: no package imports one that imports it back, only
the command line reaches the Ray job, and the decisions import nothing of the Ray shell. Imports
inside functions count: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "spotlight": "spotlight",
    "policies": "spotlight.policies",
    "actors": "spotlight.actors",
    "deployments": "spotlight.deployments",
    "job": "spotlight.job",
}
"""Source folder -> the package it installs as (pyproject.toml's package-dir)."""
SHELL = ("spotlight.job", "spotlight.actors", "spotlight.deployments")
"""The Ray shell: it moves bytes and waits; nothing it holds decides."""
MAX_LINES = 500


def _module(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [*FOLDERS[folder].split("."), *rest]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    """``spotlight.x`` for anything in ``spotlight/x`` (a top-level module is its own)."""
    return ".".join(module.split(".")[:2])


def _imports(path: Path) -> set[str]:
    """The spotlight modules ``path`` imports, anywhere in the file."""
    this = _module(path)
    is_init = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = this.split(".")[: len(this.split(".")) - node.level + is_init]
                base = ".".join([*anchor, *([base] if base else [])])
            out.update(f"{base}.{a.name}" for a in node.names)  # a module or a name in one
            out.add(base)
    return {m for m in out if m == "spotlight" or m.startswith("spotlight.")}


def _sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _sources():
        src = _package(_module(path))
        for target in _imports(path):
            dst = _package(target)
            if dst not in (src, "spotlight"):
                graph.setdefault(src, set()).add(dst)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_package_imports_one_that_imports_it_back():
    graph = _package_graph()
    assert {"spotlight.training", "spotlight.explore", "spotlight.job"} <= graph.keys()
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # The scan sees imports inside functions (the job imports its trainer lazily).
    assert "spotlight.job.trainer" in _imports(ROOT / "job" / "launch.py")


def test_only_the_command_line_reaches_the_ray_job():
    reach = {
        _module(p)
        for p in _sources()
        if not _module(p).startswith("spotlight.job")
        and any(_package(m) == "spotlight.job" for m in _imports(p))
    }
    assert {m for m in reach if not m.startswith("spotlight.cli")} == set()
    assert reach  # the command line does


def test_the_decisions_import_nothing_of_the_ray_shell():
    decide = [p for p in _sources() if p.relative_to(ROOT).parts[0] in ("spotlight", "policies")]
    shell = {
        _module(p): sorted(m for m in _imports(p) if _package(m) in SHELL)
        for p in decide
        if not _module(p).startswith("spotlight.cli")
    }
    assert {m: found for m, found in shell.items() if found} == {}


def test_no_module_is_longer_than_the_house_limit():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
