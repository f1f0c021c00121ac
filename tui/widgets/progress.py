"""Progress: step/total with a bar, throughput (tokens/s and MFU for a task that counts tokens), ETA and elapsed,
epoch, LR, batch size, best primary metric.

At 80×24 the panel has five rows for what takes seven at ease, so the parts
are fitted (tui.widgets.fit): labels shorten first ("steps/s" → "it/s",
"batch" → "bs"), then the least wanted go (the epoch, samples/s, elapsed);
the rate, tokens/s, MFU, ETA and the best value stay.

The ETA appears only after warm-up (≥ 10 steps and > 10 s since the first
step, Burn's rule): before that, start-up and the first evals make any
estimate wildly wrong. Rates come from event timestamps, not the wall clock,
so a replayed run reads the same on any machine.
"""

from __future__ import annotations

from textual.markup import escape

from engine.core.fmt import format_mfu, number
from tui.model.format import human_duration, short_float, short_label
from tui.widgets.fit import Part, fit
from tui.widgets.panel import TextPanel


class ProgressPanel(TextPanel):
    """Where the run is and how fast it goes; every number fits the panel (tui.widgets.fit)."""

    area = "progress"

    def content(self, model) -> str:
        width = self.size.width or 32  # unmounted (tests): the 80-column layout's width
        height = self.size.height or 6
        step, total = model.step, model.total_steps
        if total:
            frac = min(1.0, step / total)
            filled = int(round(frac * width))
            bar = f"[$primary]{'█' * filled}[/][$panel-lighten-2]{'░' * (width - filled)}[/]"
            lines = [f"step [b]{step}[/b]/{total}  {100 * frac:.1f}%"]
            if height >= 4:
                lines.append(bar)
        else:
            lines = [f"step [b]{step}[/b]"]
        return "\n".join(lines + fit(self.parts(model), width, max(1, height - len(lines))))

    @staticmethod
    def parts(model) -> list[Part]:
        """The labelled numbers under the bar, most wanted kept longest: rate and ETA, the best, the settings."""
        last = model.last_step
        # steps/s, samples/s and tokens/s from one window (RunModel.throughput), so steps/s × batch = samples/s:
        # the last step's own samples/s beside a smoothed steps/s read 14.5 it/s · 1100 sa/s · bs 32.
        rates = model.throughput()
        parts = []
        if last is not None:
            speed = number(rates.steps_per_s) if rates is not None and rates.steps_per_s else "–"
            steps = Part(f"{speed} steps/s", f"{speed} it/s", keep=6)
            if rates is not None and rates.tokens_per_s:  # a task that counts tokens (and MFU beside it: "–"
                tokens = number(rates.tokens_per_s)       # without a known peak, CPU)
                parts += [Part(f"{tokens} tokens/s", f"{tokens} tok/s", keep=6),
                          Part(f"MFU {format_mfu(last.mfu)}", keep=5), steps]
            else:
                parts.append(steps)
                if rates is not None and rates.samples_per_s is not None:  # None: a run that does not count them
                    samples = number(rates.samples_per_s)
                    parts.append(Part(f"{samples} samples/s", f"{samples} sa/s", keep=2))
        eta = model.eta_seconds()
        if model.ended:  # how it ended, not an ETA: "done" read as finished for a run aborted at 42/300
            eta_part = Part(model.end_status(), keep=6, alone=last is None)
        else:
            eta_text = "paused" if model.state == "paused" else \
                human_duration(eta) if eta is not None else "warming up"
            eta_part = Part(f"ETA {eta_text}", keep=6, alone=last is None)
        parts += [eta_part,
                  Part(f"elapsed {human_duration(model.elapsed())}", f"up {human_duration(model.elapsed())}", keep=3)]
        # The scheduled LR of the newest step (0 at the end of a decay is a real value, not "unknown"); the
        # configured peak only before the first step.
        lr = last.lr if last is not None else model.setting("lr")
        batch = model.setting("batch_size")
        parts += [Part(f"epoch {last.epoch if last is not None else 0}", f"ep {last.epoch if last else 0}", keep=1),
                  Part(f"lr {short_float(lr, 3)}", keep=4),
                  Part(f"batch {batch if batch is not None else '–'}", f"bs {batch if batch is not None else '–'}",
                       keep=4)]
        best = model.best_primary()
        if best is not None:
            metric = model.primary
            unit = f" {escape(metric.unit)}" if metric.unit else ""
            value = f"[$success]{short_float(best[1])}{unit}[/]"
            parts.append(Part(f"best {escape(metric.label or metric.name)} {value} @ {best[0]}",
                              f"best {escape(short_label(metric.label or metric.name))} {value} @{best[0]}", keep=5,
                              alone=True))
        elif model.starting_up:
            parts.append(Part(f"[$accent]{escape(model.phase_lines(model.clock())[-1])}[/]", keep=7, alone=True))
        return parts
