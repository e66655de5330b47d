"""How far long work is, on stderr (engine.phases): a line of its own every few percent or seconds inside `logged`
where stderr is not a terminal (a log), and nothing outside it (a test, the app's dialog, a pipe)."""
from __future__ import annotations

from engine import phases


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(progress: phases.Progress, clock: Clock, total: int, step_s: float) -> None:
    for done in range(1, total + 1):
        clock.now += step_s
        progress(done, total)


def test_a_phase_in_a_log_is_a_line_every_five_percent_with_what_and_how_far(capsys):
    clock = Clock()
    with phases.logged():
        run(phases.Progress("preparing x.gguf", clock), clock, 200, 0.05)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "preparing x.gguf: 21/200 (10%)"  # the first line once a moment (1 s) has passed
    assert lines[1] == "preparing x.gguf: 30/200 (15%)" and lines[-1] == "preparing x.gguf: 200/200 (100%)"
    assert len(lines) == 19


def test_a_slow_phase_in_a_log_says_how_far_every_thirty_seconds(capsys):
    clock = Clock()
    with phases.logged():
        progress = phases.Progress("timing the pair", clock)
        for done in range(10):  # a thousandth of the way each 16 s: a line every second step
            progress(done, 1000)
            clock.now += 16.0
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"timing the pair: {done}/1000 (0%)" for done in (1, 3, 5, 7, 9)]


def test_a_phase_done_within_a_moment_says_nothing(capsys):
    clock = Clock()
    with phases.logged():
        run(phases.Progress("timing the pair", clock), clock, 10, 0.01)
    assert capsys.readouterr().err == ""


def test_outside_a_logged_command_a_phase_off_a_terminal_says_nothing(capsys):
    clock = Clock()
    run(phases.Progress("timing the pair", clock), clock, 10, 1.0)
    phases.announce("specdec: loading x...")
    assert capsys.readouterr().err == ""


def test_an_announced_phase_in_a_log_is_a_line_of_its_own(capsys):
    with phases.logged():
        phases.announce("\rspecdec: reading x.gguf's tokenizer (once for this file)...", end="")
    assert capsys.readouterr().err == "specdec: reading x.gguf's tokenizer (once for this file)...\n"
