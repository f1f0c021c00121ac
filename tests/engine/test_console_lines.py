"""Headless console lines: tag first, then the text, then elapsed / ETA / wall-clock fields."""

from __future__ import annotations

import io
import re
import time

from engine.run import events as ev
from engine.run.sinks import ConsoleSink, clock

T0 = 1_800_000_000.0


def _lines(events: list[ev.Event], print_every: int = 10) -> list[str]:
    buf = io.StringIO()
    sink = ConsoleSink(buf, print_every=print_every)
    for event in events:
        sink(event)
    return buf.getvalue().splitlines()


def test_step_lines_carry_elapsed_eta_and_wall_clock() -> None:
    # 1 s of start-up, then 4 steps/s for 40 steps, of 100.
    events = [ev.RunStarted(t=T0, name="r", total_steps=100)]
    events += [ev.StepLogged(t=T0 + 1 + i / 4, step=i, loss=0.5, steps_per_s=999.0) for i in range(1, 41)]
    lines = _lines(events)
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 4
    last = steps[-1]
    assert re.match(r"^step\s+40/100 ", last)  # still greppable by tag and step
    wall = time.strftime("%H:%M:%S", time.localtime(T0 + 11))
    # elapsed 11 s since run_started; 60 steps left at the measured 4 steps/s (not the event's 999) = 15 s.
    assert last.endswith(f" elapsed 0:11 eta 0:15 at {wall}"), last
    start = lines[0]
    assert start.startswith("start run r") and start.endswith(time.strftime("on %Y-%m-%d", time.localtime(T0)))


def test_every_line_has_the_clock_but_the_resume_command() -> None:
    events = [ev.RunStarted(t=T0, total_steps=10), ev.EvalDone(t=T0 + 3725, step=10, val_loss=0.25),
              ev.Warning(t=T0 + 3726, text="careful"),
              ev.RunFinished(t=T0 + 3727, steps=10, resume_command="sensorlm-tui train --resume runs/r")]
    lines = _lines(events)
    assert re.search(r"^eval  step 10 val_loss 0\.25000 elapsed 1:02:05 at \d\d:\d\d:\d\d$", lines[1])
    assert re.search(r"^warn  careful elapsed 1:02:06 at ", lines[2])
    assert lines[3].startswith("done  finished at step 10 elapsed 1:02:07 at ")
    assert lines[4] == "done  resume with: sensorlm-tui train --resume runs/r"


def test_eta_without_a_total_or_rate_is_a_question_mark() -> None:
    lines = _lines([ev.StepLogged(t=T0, step=10, steps_per_s=0.0)])
    assert " eta ? " in lines[0]


def test_clock_format() -> None:
    assert [clock(s) for s in (0, 59.9, 61, 3600, 36000 + 61)] == ["0:00", "0:59", "1:01", "1:00:00", "10:01:01"]
