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


def _rates(line: str) -> dict[str, float]:
    """{"steps/s": …, "samples/s": …, "tok/s": …} as a step line prints them."""
    return {unit: float(value.replace(",", "")) for value, unit in
            re.findall(r"([\d.,]+) (steps/s|samples/s|tok/s)", line)}


def test_a_step_lines_rates_come_from_one_window_and_agree() -> None:
    """steps/s, samples/s and tokens/s are the recent window's, the pace the ETA uses: 10 steps/s when a step
    computes in 10 ms but one starts every 100 ms (data, evals between), and samples/s = steps/s × the batch,
    tokens/s = samples/s × the tokens a sample holds. The line printed the last step's own 100 steps/s."""
    batch, tokens = 32, 128
    events = [ev.RunStarted(t=T0, name="r", total_steps=1000)]
    events += [ev.StepLogged(t=T0 + 0.1 * i, step=i, loss=0.5, steps_per_s=100.0 * (1 + 0.3 * (i % 3)),
                             samples_per_s=100.0 * (1 + 0.3 * (i % 3)) * batch, batch_size=batch,
                             tokens_per_s=100.0 * (1 + 0.3 * (i % 3)) * batch * tokens, mfu=0.1)
               for i in range(1, 41)]
    last = [line for line in _lines(events) if line.startswith("step ")][-1]
    rates = _rates(last)
    assert abs(rates["steps/s"] - 10.0) < 0.1, last
    assert abs(rates["samples/s"] / (rates["steps/s"] * batch) - 1) < 0.05, last
    assert abs(rates["tok/s"] / (rates["samples/s"] * tokens) - 1) < 0.05, last
    assert " eta 1:36 " in last  # 960 steps at the same 10 steps/s


def test_a_run_that_does_not_count_its_samples_prints_no_samples_rate() -> None:
    """A plain loop that never said its batch size logs samples_per_s 0: that is unknown, not "0 samples/s"."""
    events = [ev.RunStarted(t=T0, name="mine", total_steps=100)]
    events += [ev.StepLogged(t=T0 + 0.5 * i, step=i, loss=0.5, steps_per_s=2.0 if i > 1 else 0.0)
               for i in range(1, 21)]
    steps = [line for line in _lines(events) if line.startswith("step ")]
    assert steps and all("samples/s" not in line and " 2 steps/s " in line for line in steps), steps


def test_large_rates_are_written_out_never_in_exponent_form() -> None:
    events = [ev.RunStarted(t=T0, name="lm", total_steps=100)]
    events += [ev.StepLogged(t=T0 + 0.1 * i, step=i, loss=0.5, steps_per_s=10.0, samples_per_s=160.0, batch_size=16,
                             tokens_per_s=18_610.0) for i in range(1, 11)]
    last = [line for line in _lines(events) if line.startswith("step ")][-1]
    assert " 10 steps/s 160 samples/s 18,610 tok/s MFU – " in last, last


def test_the_done_line_gives_the_step_its_checkpoint_holds() -> None:
    path = "runs/r/checkpoints/last.safetensors"
    lines = _lines([ev.RunStarted(t=T0, total_steps=300),
                    ev.RunFinished(t=T0 + 9, status="interrupted", steps=6, reason="second SIGINT: stopped at once",
                                   checkpoint=path, checkpoint_step=0, exit_code=130)])
    assert lines[1].startswith(f"done  interrupted at step 6 second SIGINT: stopped at once no checkpoint at step 6; "
                               f"a resume starts from step 0 ({path}) elapsed 0:09 at "), lines[1]
