"""Progress output: bars on a terminal only, plain lines elsewhere, nothing lost."""

from __future__ import annotations

import io

from spotlight import progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_file_or_pipe_gets_no_bars(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert not progress.use_bars(io.StringIO())
    assert not progress.use_bars(None)
    assert progress.use_bars(Tty())
    monkeypatch.setenv("TERM", "dumb")
    assert not progress.use_bars(Tty())
    monkeypatch.setenv(progress.ENV, "bars")
    assert progress.use_bars(io.StringIO())
    monkeypatch.setenv(progress.ENV, "plain")
    assert not progress.use_bars(Tty())


def test_plain_bars_print_status_lines_at_their_period_and_none_without_one(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    out = io.StringIO()
    with progress.bar(out, "validation", 4, unit="items", every_s=0.0) as b:
        b.set(1, "queue 3")
        b.set(4, "queue 0")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("  validation: 1/4 items, ") and lines[0].endswith("queue 3")
    assert "\r" not in out.getvalue()
    silent = io.StringIO()
    with progress.bar(silent, "run", 3, every_s=None) as b:
        b.update(3)
    assert silent.getvalue() == ""
    assert b.n == 3
    waiting = io.StringIO()
    with progress.bar(waiting, "the trainer's update", None, unit="s", every_s=0.0) as b:
        b.set(0)
    assert waiting.getvalue().startswith("  the trainer's update: ") and " s" in waiting.getvalue()


def test_terminal_bars_count_and_lines_print_above_them(monkeypatch):
    monkeypatch.setenv(progress.ENV, "bars")
    out = Tty()
    with progress.bar(out, "run", 5, initial=2, unit="iter", leave=True, delay_s=0) as b:
        progress.line(out, "[iter 3/5] reward 0.5")
        b.update(1)
        assert b.n == 3
    text = out.getvalue()
    assert "[iter 3/5] reward 0.5\n" in text
    assert "3/5" in text and "run" in text


def test_line_writes_plain_text_and_none_is_silent():
    out = io.StringIO()
    progress.line(out, "[spotlight] done")
    progress.line(None, "lost on purpose")
    assert out.getvalue() == "[spotlight] done\n"
