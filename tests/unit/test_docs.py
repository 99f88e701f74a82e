"""The docs stay honest: their links, repository paths and ``spotlight`` commands are real.

Scope: README.md and every ``docs/**/*.md`` for links and paths; README.md and ``docs/*.md``
(not the generated reports below docs/) for commands. Markdown is read the CommonMark way, as
far as these checks need: fenced code blocks (```` ``` ```` or ``~~~``, at any indentation) are
commands; everything else is prose, split into blocks at blank lines, with each table row and
each heading a block of its own. Inline code spans are found within a block (so a span may wrap
onto the next line; its line break reads as a space): a run of N backticks up to the next run of
exactly N backticks.

Links (prose only, not inside code spans or fences): ``[text](target)``, ``![alt](target)`` and
reference definitions ``[label]: target``. A target with a URL scheme (``http:``, ``https:``,
``mailto:``, ...) or a pure ``#anchor`` is skipped; otherwise its ``#anchor`` is cut, it is
percent-decoded and it must name an existing file or folder inside the repository, relative to
the Markdown file that holds it (``/path`` means the repository root). The ``#anchor`` of a
link to a Markdown file must name one of its ATX headings (``## Title``), slugged as GitHub does:
inline links reduced to their text, lowercased, every character but letters, digits, ``_``,
``-`` and spaces dropped, spaces made ``-``, a repeated slug suffixed ``-1``, ``-2``, ...

Repository paths (inline code spans in prose; not fenced blocks): a span is split into words at
whitespace, so a path inside a command (``python benchmarks/learn.py --out docs/bench``) counts.
From a word, wrapping quotes and parentheses and trailing ``,`` / ``;`` are cut, then everything
up to the last ``=`` (``--out=docs/bench``, ``base=spotlight/assets/x.safetensors``), then a
trailing ``:LINE``, ``:`` or ``#anchor``. What is left is a repository path when its first
component is a top-level entry of the repository (computed from the root listing, less hidden
entries, ``runs``, ``*.egg-info``, ``.venv`` and what the root .gitignore names, such as
``wandb``: a developer's run outputs count as on a fresh clone) and it contains a ``/``. Such a
path is checked unless it holds a placeholder or pattern (``<``, ``*``, ``{``, ``...``) or
starts with ``runs/`` (run outputs); it must exist, relative to the repository root. So
``spotlight.flow`` (a module: no ``/``), ``/shared/models/x``, ``DIR/summary.json``,
``spot/instance-action``, ``assets/calib/x.json`` (no top-level ``assets``) and URLs are not
paths.

Commands: a line whose first word, after an optional ``$ `` prompt and an optional ``ray job
submit ... --`` (the cluster's form), is ``spotlight``, in a
fenced block (``\\`` continuations joined first) or an inline code span that starts with
``spotlight ``. Skipped: a usage synopsis or placeholder (the line holds ``...``, ``[``, ``<``) or
alternatives (``a|b``, ``\\|``). A spaced shell operator (``|``, ``&&``, ``;``, ``>``, ``2>&1``)
ends the command; ``#`` starts a comment. ``$VAR`` / ``${VAR}`` read as the bare name ``VAR``.
The words after ``spotlight`` go to ``build_parser().parse_args``: any argparse error fails the
test with the file, the line, the command and argparse's message. Two allowances:
- placeholders: a value written as an all-caps word (``DIR``, ``N``, ``LR``, or a ``$VAR``) or
  a single lowercase letter (``--sp-degree d``) that argparse rejects as an int, a float or a
  choice is replaced by a valid value (1, 1.0, the first choice) and the line is parsed again,
  so the flag names are still checked. Any other word is a literal value;
- mentions: an inline span names a command or a flag rather than a full command line
  (`spotlight simulate`, `spotlight train --spot-trace`), so for inline spans a missing
  required argument, or a missing value of the span's last word, is not an error. Fenced lines
  are meant to be pasted and must parse completely.

README.md stays under 200 lines.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import re
import shlex
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from spotlight.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK_FILES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND_FILES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200  # README.md must have fewer lines than this


def _ignored_names() -> list[str]:
    """The root .gitignore's patterns for top-level names (``runs/``, ``wandb/``, ...)."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    patterns = (line.strip().strip("/") for line in lines if not line.startswith(("#", "!")))
    return [p for p in patterns if p and "/" not in p]


# Top-level entries a repository path can start with: what a fresh clone has (an ignored run
# output such as wandb/ on a developer's machine would make `wandb/` a path there only).
TOP_LEVEL = sorted(
    p.name
    for p in ROOT.iterdir()
    if not p.name.startswith(".")
    and p.name not in {"runs", ".venv"}
    and not p.name.endswith(".egg-info")
    and not any(fnmatch.fnmatch(p.name, pat) for pat in _ignored_names())
)


@dataclass(frozen=True)
class Item:
    file: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


# --- Markdown reading --------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^()]*(?:\([^()]*\)[^()]*)*)\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)


def _read(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose blocks, fenced lines): each prose block is (first line number, text)."""
    blocks: list[tuple[int, str]] = []
    fenced: list[tuple[int, str]] = []
    fence: str | None = None
    cur: list[tuple[int, str]] = []

    def flush() -> None:
        if cur:
            blocks.append((cur[0][0], "\n".join(t for _, t in cur)))
            cur.clear()

    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            else:
                fenced.append((n, line))
            continue
        if m:
            flush()
            fence = m.group(1)
            continue
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith(("|", "#")):  # a table row or heading: a block of its own
            flush()
            blocks.append((n, line))
        else:
            cur.append((n, line))
    flush()
    return blocks, fenced


def _spans(block: tuple[int, str]) -> list[tuple[int, str, int, int]]:
    """The block's inline code spans: (line, content, start, end in the block's text)."""
    first, text = block
    out = []
    for m in CODE_SPAN.finditer(text):
        content = m.group(2).replace("\n", " ")
        if content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        out.append((first + text.count("\n", 0, m.start()), content, m.start(), m.end()))
    return out


# --- what is checked ---------------------------------------------------------------------------


def _links() -> list[Item]:
    items = []
    for path in LINK_FILES:
        for block in _read(path)[0]:
            first, text = block
            for _, _, start, end in _spans(block):  # blank out code spans, keep offsets
                text = text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]
            found = [(m.start(), m.group(1)) for m in INLINE_LINK.finditer(text)]
            found += [(m.start(), m.group(1)) for m in REF_DEF.finditer(text)]
            for start, target in found:
                target = target.strip()
                if target.startswith("<"):
                    target = target[1:].split(">", 1)[0]
                elif target:
                    target = target.split()[0]  # drop a "title"
                if not target or target.startswith("#"):
                    continue
                if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                items.append(Item(path, first + text.count("\n", 0, start), target))
    return items


def _repo_path(word: str) -> str | None:
    """The repository path a word of a code span names, or None (see the module docstring)."""
    word = word.strip("'\"").rstrip(",;")
    if word.startswith("(") and word.endswith(")"):
        word = word[1:-1]
    elif word.startswith("(") and ")" not in word:
        word = word[1:]
    elif word.endswith(")") and "(" not in word:
        word = word[:-1]
    word = word.rsplit("=", 1)[-1]
    word = re.sub(r":\d+(-\d+)?$", "", word).rstrip(":").split("#", 1)[0]
    if "/" not in word or word.split("/", 1)[0] not in TOP_LEVEL:
        return None
    if any(s in word for s in ("<", "*", "{", "...")) or word.startswith("runs/"):
        return None
    return word


def _paths() -> list[Item]:
    items = []
    for path in LINK_FILES:
        for block in _read(path)[0]:
            for line, content, _, _ in _spans(block):
                for word in content.replace("\\|", " ").split():
                    if (p := _repo_path(word)) is not None:
                        items.append(Item(path, line, p))
    return items


COMMAND_LINE = re.compile(r"^\s*(?:\$\s+)?(?:ray job submit\b.*?\s--\s+)?(spotlight(?:\s.*)?)$")


def _commands() -> list[tuple[Item, bool]]:
    """(command, inline?) for every ``spotlight`` line of the command files."""
    items: list[tuple[Item, bool]] = []
    for path in COMMAND_FILES:
        blocks, fenced = _read(path)
        joined: list[tuple[int, str]] = []
        pending: tuple[int, str] | None = None
        for n, line in fenced:
            if pending is not None:
                line = pending[1] + " " + line.strip()
                n = pending[0]
                pending = None
            if line.rstrip().endswith("\\"):
                pending = (n, line.rstrip()[:-1].rstrip())
                continue
            joined.append((n, line))
        if pending is not None:
            joined.append(pending)
        for n, line in joined:
            if m := COMMAND_LINE.match(line):
                items.append((Item(path, n, m.group(1).strip()), False))
        for block in blocks:
            for line, content, _, _ in _spans(block):
                if content.startswith("spotlight "):
                    items.append((Item(path, line, re.sub(r"\s+", " ", content)), True))
    return items


# --- the tests ---------------------------------------------------------------------------------


def _ids(items: list[Item]) -> list[str]:
    return [f"{i.where}:{i.text}" for i in items]


LINKS = _links()
PATHS = _paths()
COMMANDS = _commands()


def test_found_something():
    """The readers above still see the docs (a Markdown change could hide every item)."""
    assert len(LINKS) > 5 and len(PATHS) > 20 and len(COMMANDS) > 10


@pytest.mark.parametrize("item", LINKS, ids=_ids(LINKS))
def test_relative_link_resolves(item: Item):
    target = urllib.parse.unquote(item.text.split("#", 1)[0])
    base = ROOT if target.startswith("/") else item.file.parent
    resolved = (base / target.lstrip("/")).resolve()
    assert resolved.is_relative_to(ROOT), f"{item.where}: link {item.text!r} leaves the repository"
    assert resolved.exists(), f"{item.where}: link {item.text!r} names no file or folder"


ANCHORED = [i for i in LINKS if "#" in i.text and i.text.split("#", 1)[0].endswith(".md")]


@functools.cache
def _slugs(path: Path) -> set[str]:
    """The anchors GitHub gives the ATX headings of a Markdown file."""
    slugs: set[str] = set()
    seen: dict[str, int] = {}
    for _, text in _read(path)[0]:
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", text)
        if not m:
            continue
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        slugs.add(slug if k == 0 else f"{slug}-{k}")
    return slugs


@pytest.mark.parametrize("item", ANCHORED, ids=_ids(ANCHORED))
def test_link_anchor_exists(item: Item):
    target, anchor = item.text.split("#", 1)
    base = ROOT if target.startswith("/") else item.file.parent
    path = (base / urllib.parse.unquote(target).lstrip("/")).resolve()
    if not path.is_file():
        pytest.skip("the file is missing: test_relative_link_resolves reports it")
    assert urllib.parse.unquote(anchor) in _slugs(path), (
        f"{item.where}: link {item.text!r}: {target} has no heading with anchor #{anchor}"
    )


@pytest.mark.parametrize("item", PATHS, ids=_ids(PATHS))
def test_repository_path_exists(item: Item):
    assert (ROOT / item.text).exists(), f"{item.where}: `{item.text}` is not in the repository"


METAVAR = re.compile(r"^(?:[A-Z][A-Z0-9_]*|[a-z])$")  # DIR, N, LR; d, k
ALTERNATIVES = re.compile(r"\\\||\S\|\S")
SHELL_OPERATOR = re.compile(r"^[|&;<>()]+$")
BAD_VALUE = re.compile(r"argument (\S+): invalid (int|float|choice)(?: value)?: '([^']*)'")


def _argv(command: str) -> list[str]:
    command = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: m.group(1) or m.group(2), command)
    command = re.sub(r"(^|\s)#.*$", "", command)  # a comment: "#" at the start of a word
    command = re.sub(r"(?<!\S)\d+(?=[<>])", "", command)  # "2>&1": the 2 is a file descriptor
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = ""
    words = []
    for word in lex:
        if SHELL_OPERATOR.match(word):
            break
        words.append(word)
    return words[1:]  # after "spotlight"


def _parse(parser, argv: list[str]) -> tuple[int, str]:
    """parse_args's exit code (0: parsed or --help) and its error message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as e:
        return (e.code if isinstance(e.code, int) else 1), err.getvalue().strip()
    return 0, ""


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.mark.parametrize(
    "item,inline",
    COMMANDS,
    ids=[f"{i.where}:{'inline' if inline else 'fenced'}:{i.text[:60]}" for i, inline in COMMANDS],
)
def test_command_parses(item: Item, inline: bool, parser):
    if "..." in item.text or "[" in item.text or "<" in item.text:
        pytest.skip("a usage synopsis or placeholder")
    if ALTERNATIVES.search(item.text):
        pytest.skip("alternatives (a|b)")
    argv = _argv(item.text)
    for _ in range(len(argv) + 1):
        code, message = _parse(parser, argv)
        m = BAD_VALUE.search(message)
        if code == 0 or not m or not METAVAR.match(m.group(3)):
            break
        # a placeholder the parser rejects: put a valid value in its place and parse again
        kind, value = m.group(2), m.group(3)
        if kind == "choice":
            choices = re.search(r"\(choose from (.*)\)", message)
            replacement = re.findall(r"'([^']*)'", choices.group(1))[0] if choices else value
        else:
            replacement = "1" if kind == "int" else "1.0"
        argv = [replacement if w == value else w for w in argv]
    if code != 0 and inline:
        last = argv[-1] if argv else ""
        if "the following arguments are required" in message:
            return  # a mention of a command or a flag, not a full command line
        if last.startswith("-") and re.search(rf"argument {re.escape(last)}\b.*expected", message):
            return  # `spotlight train --spot-trace`: a mention of the flag
    assert code == 0, (
        f"{item.where}: `{item.text}` does not parse "
        f"(spotlight {shlex.join(argv)}): {message.splitlines()[-1] if message else code}"
    )


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n < README_MAX_LINES, f"README.md has {n} lines; keep it under {README_MAX_LINES}"


@pytest.mark.parametrize(
    "word,path",
    [
        ("spotlight/flow/grpo.py", "spotlight/flow/grpo.py"),
        ("spotlight/flow/grpo.py:42", "spotlight/flow/grpo.py"),
        ("docs/benchmarks.md#preemptions", "docs/benchmarks.md"),
        ("--out=docs/bench", "docs/bench"),
        ("base=spotlight/assets/ocr-mini.safetensors", "spotlight/assets/ocr-mini.safetensors"),
        ("(tests/unit),", "tests/unit"),
        ("spotlight.flow.grpo", None),  # a module
        ("runs/<recipe>-<time>/", None),
        ("runs/try", None),
        ("tests/ray_tests/test_preemption*.py", None),
        ("docs/bench/grpo_signal-*.json", None),
        ("runs/.../wandb", None),
        ("https://github.com/x/y", None),
        ("/shared/models/Qwen-Image", None),
        ("DIR/summary.json", None),
        ("spot/instance-action", None),
        ("README.md", None),  # no "/"
    ],
)
def test_rule_repository_path(word, path):
    assert _repo_path(word) == path


@pytest.mark.parametrize(
    "command,argv",
    [
        ("spotlight train --out $OUT", ["train", "--out", "OUT"]),
        ("spotlight train --out ${RUN}/x # comment", ["train", "--out", "RUN/x"]),
        ("spotlight train --set a#b", ["train", "--set", "a#b"]),
        ("spotlight simulate --out d 2>&1 | tee log", ["simulate", "--out", "d"]),
        ("spotlight train --iterations 2 > log", ["train", "--iterations", "2"]),
        ("spotlight train --set 'x=a b'", ["train", "--set", "x=a b"]),
    ],
)
def test_rule_command_words(command, argv):
    assert _argv(command) == argv


def test_rule_markdown_reading(tmp_path):
    md = tmp_path / "x.md"
    md.write_text(
        "See `spotlight/flow/\ngrpo.py` and [a\nlink](docs/design.md#top).\n\n"
        "```bash\nspotlight train \\\n  --iterations 3\n`docs/not-a-span.md`\n```\n"
        "| `a` | [t](b.md) |\n"
    )
    blocks, fenced = _read(md)
    assert [c for b in blocks for _, c, _, _ in _spans(b)] == ["spotlight/flow/ grpo.py", "a"]
    assert [n for n, _ in fenced] == [6, 7, 8]
