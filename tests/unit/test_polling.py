"""poll_until: doubling delays up to a cap, None at the deadline, a probe's error propagates."""

from __future__ import annotations

import pytest

from spotlight.scheduling.polling import poll_until


class FakeClock:
    def __init__(self):
        self.t = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def test_it_returns_the_first_value_and_backs_off_up_to_the_cap():
    clock = FakeClock()
    answers = iter([None, None, None, None, "v3"])
    got = poll_until(lambda: next(answers), 10.0, 0.01, 0.03, clock=clock, sleep=clock.sleep)
    assert got == "v3"
    assert clock.sleeps == [0.01, 0.02, 0.03, 0.03]


def test_it_gives_none_once_the_deadline_has_passed():
    clock = FakeClock()
    calls = []
    got = poll_until(lambda: calls.append(1), 1.0, 0.25, 0.25, clock=clock, sleep=clock.sleep)
    assert got is None
    assert clock.t > 1.0 and len(calls) == 6  # t = 0, .25, .5, .75, 1.0, then 1.25 > 1


def test_a_probe_that_knows_it_will_never_succeed_raises_at_once():
    clock = FakeClock()

    def probe():
        raise LookupError("weights v1 is gone")

    with pytest.raises(LookupError):
        poll_until(probe, 10.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []
