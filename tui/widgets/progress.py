"""Progress: step/total with a bar, epoch, throughput (tokens/s and MFU for a task that counts tokens), elapsed
and ETA, LR, batch size, best primary metric.

The ETA appears only after warm-up (≥ 10 steps and > 10 s since the first
step, Burn's rule): before that, start-up and the first evals make any
estimate wildly wrong. Rates come from event timestamps, not the wall clock,
so a replayed run reads the same on any machine.
"""

from __future__ import annotations

from textual.markup import escape

from engine.core.fmt import format_mfu
from tui.model.format import human_duration, short_float
from tui.widgets.panel import TextPanel


class ProgressPanel(TextPanel):
    """Where the run is and how fast it goes."""

    area = "progress"

    def content(self, model) -> str:
        step, total = model.step, model.total_steps
        width = max(10, self.size.width or 30)
        if total:
            frac = min(1.0, step / total)
            filled = int(round(frac * width))
            bar = f"[$primary]{'█' * filled}[/][$panel-lighten-2]{'░' * (width - filled)}[/]"
            head = f"step [b]{step}[/b]/{total}  {100 * frac:.1f}%"
        else:
            bar, head = "", f"step [b]{step}[/b]"
        last = model.last_step
        rate = model.steps_per_s()
        lines = [head, bar] if bar else [head]
        eta = model.eta_seconds()
        if model.ended:
            eta_text = "done"
        elif model.state == "paused":
            eta_text = "paused"
        else:
            eta_text = human_duration(eta) if eta is not None else "warming up"
        lines.append(f"ETA {eta_text} · elapsed {human_duration(model.elapsed())}")
        # The scheduled LR of the newest step (0 at the end of a decay is a real value, not "unknown"); the
        # configured peak only before the first step.
        lr = last.lr if last is not None else model.setting("lr")
        batch = model.setting("batch_size")
        epoch = last.epoch if last is not None else 0
        lines.append(f"epoch {epoch} · lr {short_float(lr, 3)} · batch {batch if batch is not None else '–'}")
        best = model.best_primary()
        if best is not None:
            metric = model.primary
            unit = f" {escape(metric.unit)}" if metric.unit else ""
            lines.append(f"best {escape(metric.label or metric.name)} [$success]{short_float(best[1])}{unit}[/]"
                         f" @ {best[0]}")
        elif model.starting_up:
            lines.append(f"[$accent]{escape(model.phase_lines(model.clock())[-1])}[/]")
        if last is not None:
            lines.append(f"{short_float(rate, 3) if rate else '–'} steps/s · {last.samples_per_s:.0f} samples/s")
            if last.tokens_per_s:  # a task that counts tokens; MFU "–" without a known peak (CPU)
                lines.append(f"{last.tokens_per_s:.0f} tokens/s · MFU {format_mfu(last.mfu)}")
        return "\n".join(lines)
