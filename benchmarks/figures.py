"""The documented figures against their JSON: regenerate them, or check the docs still match.

The registry is plain data, ``benchmarks/figures.toml``: a ``[commands.NAME]`` table per command
(``set``: quick or long; ``run``: the shell command, from the repository root; ``outputs``: the
files it writes) and a ``[[figures]]`` entry per quoted sentence:

- ``doc``: the Markdown file that quotes it, relative to the repository root;
- ``quote``: a distinctive snippet of its text with each checked number written ``{name}``
  (``{_}`` is a number not checked); whitespace in the quote matches any run of whitespace, so
  a sentence may wrap;
- ``command``: the command that produces it (its ``set`` is the figure's set);
- ``values.NAME``: how the number is read: ``json`` (a file; default: the command's first
  output; ``.jsonl`` is a list of rows), ``path`` (keys and list indices joined by ``.``; ``*``
  is every element of a list, ``[key=value]`` the elements whose ``key`` is ``value``),
  optional ``agg`` (``mean``, ``median``, ``min``, ``max``, ``sum``, ``count``, ``last`` over
  the list the path gives, nulls left out), ``minus`` / ``over`` (a path read the same way,
  subtracted / divided by), ``scale`` (a factor, e.g. 100 for a percentage) and ``fmt`` (a
  format spec, default ``.3f``). The documented number must equal the formatted value
  exactly, unless ``tol`` (absolute) or ``rtol`` (relative) allows a difference (timings).

``--check`` (the default) only compares; ``--regenerate`` runs the selected set's commands first.
``--command NAME ...`` narrows either to those commands (the long set takes hours: it can be
run one command at a time, each result committed as it lands); ``--list`` prints the commands.
Numbers in the docs that no entry registers are not checked. Exit 1 names each failing figure:
its file, line, sentence and both values.

    python benchmarks/figures.py --check                 # every registered figure
    python benchmarks/figures.py --regenerate --set quick
    python benchmarks/figures.py --regenerate --command default-run default-run-heldout
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "benchmarks" / "figures.toml"
SETS = ("quick", "long")
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
SENTENCE_CHARS = 240  # at most this many characters of the sentence in a failure line
AGGREGATES = {
    "mean": statistics.fmean,
    "median": statistics.median,
    "min": min,
    "max": max,
    "sum": sum,
    "count": len,
    "last": lambda xs: xs[-1],
}


@dataclasses.dataclass(frozen=True)
class Failure:
    """One figure whose documented number is not what its JSON gives (or cannot be read)."""

    doc: str
    line: int
    sentence: str
    message: str

    def __str__(self) -> str:
        where = f"{self.doc}:{self.line}" if self.line else self.doc
        return f"{where}: {self.message}\n    sentence: {self.sentence}"


def load_registry(path: Path = REGISTRY) -> dict[str, Any]:
    """The registry's commands and figures, each figure's set taken from its command."""
    reg = tomllib.loads(path.read_text())
    commands = reg.get("commands", {})
    for name, cmd in commands.items():
        if cmd.get("set") not in SETS:
            raise ValueError(f"{path.name}: command {name!r} has set {cmd.get('set')!r}")
    for fig in reg.get("figures", []):
        if fig.get("command") not in commands:
            raise ValueError(f"{path.name}: figure {fig.get('quote')!r} names no known command")
    return reg


def quote_regex(quote: str) -> tuple[re.Pattern[str], list[str]]:
    """A regex matching ``quote`` with whitespace runs flexible and each ``{name}`` a number."""
    parts = re.split(r"(\{\w+\})", quote.strip())
    names: list[str] = []
    out = []
    for part in parts:
        if re.fullmatch(r"\{\w+\}", part):
            name = part[1:-1]
            out.append(f"({NUMBER})" if name != "_" else NUMBER)
            if name != "_":
                names.append(name)
        else:
            out.append(r"\s+".join(re.escape(w) for w in part.split()))
            out[-1] = (r"\s+" if part[:1].isspace() else "") + out[-1]
            out[-1] += r"\s+" if part[-1:].isspace() and part.strip() else ""
    return re.compile("".join(out)), names


def read_json(path: Path) -> Any:
    """A JSON file, or a ``.jsonl`` file as its list of rows."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def _step(node: Any, key: str) -> Any:
    if isinstance(node, list) and key == "*":
        return node
    filt = re.fullmatch(r"\[(\w+)=(.*)\]", key)
    if filt:
        return [x for x in node if str(x.get(filt.group(1))) == filt.group(2)]
    if isinstance(node, list):
        return node[int(key)]
    return node[key]


def read_path(data: Any, path: str) -> Any:
    """``data`` at a dotted ``path``; after a ``*`` or a filter, the rest maps over the list
    (an index right after one picks an element); a dict's key may hold a dot."""
    keys = path.split(".") if path else []
    node, listed = data, False
    while keys:
        key = keys.pop(0)
        while isinstance(node, dict) and key not in node and keys:  # a key with a dot in it
            key += "." + keys.pop(0)
        if listed and key.isdigit():  # one element of the list a filter or ``*`` gave
            node, listed = node[int(key)], False
        elif listed:  # a row without the key (a metric not logged every iteration): null
            node = [None if isinstance(x, dict) and key not in x else _step(x, key) for x in node]
        else:
            node = _step(node, key)
            listed = key == "*" or key.startswith("[")
    return node


def figure_value(spec: dict[str, Any], default_json: str, root: Path = ROOT) -> float:
    """The number a value spec reads from its JSON (relative to ``root``), before formatting."""
    data = read_json(root / spec.get("json", default_json))
    value = read_path(data, spec["path"])
    if "agg" in spec:
        value = AGGREGATES[spec["agg"]]([v for v in value if v is not None])
    for key, combine in (("minus", float.__sub__), ("over", float.__truediv__)):
        if key in spec:
            other = read_path(data, spec[key])
            if "agg" in spec:
                other = AGGREGATES[spec["agg"]]([v for v in other if v is not None])
            value = combine(float(value), float(other))
    return float(value) * spec.get("scale", 1.0)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence (or table cell) around ``text[start:end]``, whitespace collapsed; a long
    one is cut around the match."""
    stops = [m.end() for m in re.finditer(r"[.!?]\s|\n\s*\n|\|", text[:start])]
    left = stops[-1] if stops else 0
    after = re.search(r"[.!?](?=\s)|\n\s*\n|\|", text[end:])
    right = end + (after.start() + (after.group()[0] in ".!?") if after else len(text) - end)
    if right - left > SENTENCE_CHARS:
        left = max(left, start - SENTENCE_CHARS // 3)
        right = min(right, max(end, left + SENTENCE_CHARS))
    return " ".join(text[left:right].split())


def check_figure(fig: dict[str, Any], commands: dict[str, Any], root: Path) -> list[Failure]:
    """The failures of one registered figure (none when every number matches)."""
    doc_path = root / fig["doc"]
    if not doc_path.exists():
        return [Failure(fig["doc"], 0, fig["quote"], "the file does not exist")]
    text = doc_path.read_text()
    regex, names = quote_regex(fig["quote"])
    match = regex.search(text)
    if match is None:
        msg = "the quote is not in the file (reworded, or a number outside {name} changed)"
        return [Failure(fig["doc"], 0, fig["quote"], msg)]
    line = text.count("\n", 0, match.start()) + 1
    sentence = _sentence(text, match.start(), match.end())
    outputs = commands[fig["command"]].get("outputs", [])
    failures = []
    for i, name in enumerate(names):
        spec = fig["values"][name]
        src = spec.get("json", outputs[0] if outputs else "")
        documented = match.group(i + 1)
        try:
            value = figure_value(spec, src, root)
        except (OSError, KeyError, IndexError, ValueError, TypeError) as e:
            msg = f"{name}: cannot read {spec['path']!r} from {src}: {type(e).__name__}: {e}"
            failures.append(Failure(fig["doc"], line, sentence, msg))
            continue
        formatted = format(value, spec.get("fmt", ".3f"))
        if "tol" in spec or "rtol" in spec:
            bound = max(spec.get("tol", 0.0), spec.get("rtol", 0.0) * abs(value))
            ok = abs(_number(documented) - value) <= bound + 1e-12
            allowed = f" (allowed difference {bound:.4g})"
        else:
            ok = documented.lstrip("+") == formatted.lstrip("+")
            allowed = ""
        if not ok:
            msg = (
                f"{name}: the doc says {documented}, {src} ({spec['path']}) gives {formatted}"
                f"{allowed}"
            )
            failures.append(Failure(fig["doc"], line, sentence, msg))
    return failures


def selected(reg: dict[str, Any], which: str, names: list[str] | None = None) -> list[str]:
    """The commands of set ``which`` (quick, long or all), in the registry's order; only
    ``names`` among them when given.

    Raises:
        ValueError: a name that no command has, naming the known ones.
    """
    commands = reg.get("commands", {})
    unknown = sorted(set(names or ()) - set(commands))
    if unknown:
        raise ValueError(f"no command {', '.join(unknown)}; known: {', '.join(commands)}")
    return [
        name
        for name, cmd in commands.items()
        if which in ("all", cmd["set"]) and (names is None or name in names)
    ]


def check(
    reg: dict[str, Any], which: str, root: Path = ROOT, names: list[str] | None = None
) -> list[Failure]:
    """Every failure among the registered figures of the selected commands (:func:`selected`)."""
    commands, chosen = reg.get("commands", {}), set(selected(reg, which, names))
    failures = []
    for fig in reg.get("figures", []):
        if fig["command"] in chosen:
            failures += check_figure(fig, commands, root)
    return failures


def regenerate(reg: dict[str, Any], which: str, names: list[str] | None = None) -> str | None:
    """Run the selected commands (:func:`selected`), from the repository root, one after the
    other; stop at the first that fails and return a line saying which (None if all ran)."""
    chosen = selected(reg, which, names)
    for i, name in enumerate(chosen):
        cmd = reg["commands"][name]
        print(f"[figures] {name}: {cmd['run']}", flush=True)
        code = subprocess.run(cmd["run"], shell=True, cwd=ROOT).returncode
        if code != 0:
            rest = f"; not run: {', '.join(chosen[i + 1 :])}" if chosen[i + 1 :] else ""
            return f"[figures] {name} failed (exit {code}; its output is above){rest}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="which", choices=(*SETS, "all"), default="all")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare only (the default)")
    mode.add_argument("--regenerate", action="store_true", help="run the commands, then check")
    mode.add_argument("--list", action="store_true", help="print the commands and their sets")
    parser.add_argument(
        "--command", nargs="+", metavar="NAME", help="only these commands (see --list)"
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the tree whose docs and JSON are checked"
    )
    args = parser.parse_args(argv)
    reg = load_registry()
    try:
        names = selected(reg, args.which, args.command)
    except ValueError as e:
        parser.error(str(e))
    if args.list:
        for name in names:
            cmd = reg["commands"][name]
            print(f"{name} ({cmd['set']}): {cmd['run']}")
        return 0
    if args.regenerate:
        failed = regenerate(reg, args.which, args.command)
        if failed:
            print(failed)
            return 1
    failures = check(reg, args.which, args.root, args.command)
    figures = [f for f in reg.get("figures", []) if f["command"] in names]
    for failure in failures:
        print(failure)
    scope = f"command(s) {', '.join(names)}" if args.command else f"set {args.which}"
    print(f"[figures] {len(figures)} figure(s) of {scope}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
