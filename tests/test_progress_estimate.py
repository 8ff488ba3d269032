"""The progress line's time left is sane from the first estimate on (a fake clock, no wall-clock time)."""

from __future__ import annotations

import re

from fieldeval.run.progress import Progress

KEY = ("ebs", "m")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _simulate(total: int, concurrency: int, latency: float, startup: float) -> list[tuple[float, str]]:
    """Items answered by a pool of ``concurrency`` calls of ``latency`` s each: (true seconds left, line) per item."""
    clock = Clock()
    progress = Progress(clock=clock)
    progress.plan([KEY] * total)
    end = startup + latency * -(-total // concurrency)
    lines = []
    for n in range(total):
        clock.now = startup + latency * (n // concurrency + 1) + 0.001 * (n % concurrency)
        progress.finish(KEY, failed=False)
        lines.append((end - clock.now, progress.line(KEY)))
    return lines


def test_no_estimate_before_a_second_item_finished():
    (_, first), *_ = _simulate(46, 8, 1.0, startup=5.0)
    assert first == "ebs m: 1/46 items, 0 error(s), estimating"


def test_every_estimate_after_the_first_round_is_within_a_factor_of_two_of_the_truth():
    # the first estimate of a 46 s run said 428 s left (issue 20): it counted start-up and one call's latency
    lines = _simulate(46, 8, 6.0, startup=20.0)
    for truth, line in lines[8:-8]:  # from the second round of calls on, while time is left
        left = float(re.search(r"(\d+) s left", line).group(1))
        assert truth / 2 <= left <= truth * 2, (truth, line)


def test_a_slow_model_reads_in_seconds_per_item_and_cached_answers_read_no_rate():
    # a local model at 14 s an item read "0.0 items/s"; 100 cached answers in a blink read "844382.2 items/s"
    *_, (_, slow) = _simulate(6, 1, 14.0, startup=0.0)
    assert slow == "ebs m: 6/6 items, 0 error(s), 14.0 s/item, done"
    *_, (_, cached) = _simulate(100, 100, 0.00001, startup=0.0)
    assert cached == "ebs m: 100/100 items, 0 error(s), done"


def test_the_last_line_says_done_with_the_rate():
    *_, (_, last) = _simulate(10, 2, 1.0, startup=0.0)
    assert re.fullmatch(r"ebs m: 10/10 items, 0 error\(s\), [\d.]+ items/s, done", last)
