"""Memory: one gauge with measured peak, predicted peak (and the error in %), budget and capacity; history.

Which number is "the" memory confuses users (pytorch #37250): allocated is
live tensors, reserved is what the caching allocator holds, NVML is what the
driver says the process uses (context and workspaces included). All three are
shown side by side, with the prediction the engine plans against and their
ratio, so a drifting estimate is visible at a glance.
"""

from __future__ import annotations

import numpy as np
from textual.markup import escape

from tui.model.dashboard import MEM_COLUMNS
from tui.model.format import human_bytes
from tui.widgets.fit import Part, fit
from tui.widgets.panel import TextPanel

#: Predicted/budget ratios: ≤ FITS is comfortable, ≤ 1 is tight, above does not fit.
FITS = 0.85


def fit_class(need: float | None, budget: float | None) -> str:
    """'fits', 'tight' or 'over' for a need against a budget ('unknown' without one)."""
    if not need or not budget:
        return "unknown"
    ratio = need / budget
    return "fits" if ratio <= FITS else ("tight" if ratio <= 1.0 else "over")


#: Theme variable per fit class.
FIT_COLOR = {"fits": "$success", "tight": "$warning", "over": "$error", "unknown": "$foreground"}


def gauge(width: int, measured: int | None, predicted: int | None, budget: int | None,
          capacity: int | None) -> str:
    """A one-line bar scaled to the capacity: █ measured, ▒ predicted beyond it, ┃ the budget, ─ free."""
    width = max(10, width)
    scale = capacity or (max(v or 0 for v in (measured, predicted, budget)) * 1.15) or 1

    def cell(value: int | None) -> int:
        return min(width, int(round(value / scale * width))) if value else 0

    used = fit_class(measured, budget)
    m, p = cell(measured), cell(predicted)
    cells = [("█", FIT_COLOR[used])] * m
    cells += [("▒", "$primary")] * max(0, p - m)
    cells += [("─", "$panel-lighten-2")] * (width - len(cells))
    if budget:
        b = min(width - 1, max(0, cell(budget) - 1))
        cells[b] = ("┃", "$error" if used == "over" else "$warning")
    out, i = [], 0
    while i < width:  # run-length encode: one markup tag per colour run keeps the escapes few
        j = i
        while j < width and cells[j][1] == cells[i][1]:
            j += 1
        out.append(f"[{cells[i][1]}]{''.join(c for c, _ in cells[i:j])}[/]")
        i = j
    return "".join(out)


#: Eighth-blocks for the one-line history.
_BLOCKS = "▁▂▃▄▅▆▇█"


def spark_line(values: np.ndarray, width: int) -> str:
    """Measured memory history as one line of eighth-blocks, max per column (numpy, not a Python bucket loop).

    One colour for the whole line on purpose: Textual's Sparkline colours
    every cell on a gradient, one escape sequence per cell, which made the
    memory panel 40 % of the dashboard's bytes on the wire.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not len(values) or width < 1:
        return ""
    if len(values) > width:
        edges = np.linspace(0, len(values), width + 1).astype(np.int64)[:-1]
        values = np.maximum.reduceat(values, edges)
    low, high = float(values.min()), float(values.max())
    span = high - low
    levels = np.zeros(len(values), dtype=np.int64) if span <= 0 else \
        np.minimum(len(_BLOCKS) - 1, ((values - low) / span * len(_BLOCKS)).astype(np.int64))
    return "".join(_BLOCKS[i] for i in levels)


class MemoryPanel(TextPanel):
    """Gauge, numbers, predicted breakdown and a one-line history of measured peak memory.

    Rows are fitted to the panel (tui.widgets.fit): at 100 columns "capacity" reads "cap" and the error
    takes the next row rather than losing its "%"; the least wanted numbers (RSS, the breakdown) go first.
    """

    area = "memory"

    def content(self, model) -> str:
        width = max(10, self.size.width or 40)
        height = self.size.height or 5
        rows = self.gauge_and_parts(model, width)
        if isinstance(rows, str):
            return rows
        gauge_row, parts = rows
        history = self.history_part(model, width)
        if history is not None:
            parts.append(history)
        return "\n".join([gauge_row, *fit(parts, width, max(1, height - 1))])

    @staticmethod
    def history_part(model, width: int) -> Part | None:
        """"peak history ▁▂▅█ 41–48.5 MiB": the measured peaks over the run, with the range the bars span."""
        if not len(model.memory):
            return None
        values = model.memory.column(MEM_COLUMNS.index("peak"))
        if not np.isfinite(values).any():
            values = model.memory.column(MEM_COLUMNS.index("allocated"))
        finite = values[np.isfinite(values)]
        if not len(finite):
            return None
        low, high = human_bytes(float(finite.min())), human_bytes(float(finite.max()))
        span = high if low == high else (f"{low.split(' ')[0]}–{high}" if low.split(" ")[1:] == high.split(" ")[1:]
                                         else f"{low}–{high}")
        long_line = spark_line(values, max(4, width - len("peak history ") - len(span) - 2))
        short_line = spark_line(values, max(4, width - len("hist ") - len(span) - 2))
        return Part(f"[$text-muted]peak history[/] [$warning]{long_line}[/] {span}",
                    f"[$text-muted]hist[/] [$warning]{short_line}[/] {span}", keep=2, alone=True)

    @staticmethod
    def gauge_and_numbers(model, width: int) -> str:
        """Gauge and numbers as markup, unfitted (one part a row's worth: tests and the benchmark read it)."""
        rows = MemoryPanel.gauge_and_parts(model, width)
        if isinstance(rows, str):
            return rows
        return "\n".join([rows[0], *fit(rows[1], width, lines=len(rows[1]))])

    @staticmethod
    def gauge_and_parts(model, width: int) -> str | tuple[str, list[Part]]:
        """The gauge row and the labelled numbers under it; a one-line message instead when nothing is known.
        Only numbers that exist (a CPU run shows what it measures, no dashes)."""
        mem = model.last_memory
        budget, capacity = model.budget_bytes(), model.capacity_bytes()
        limits = [Part(f"budget {human_bytes(budget)}", keep=5, alone=True)] if budget else []
        if capacity:
            limits.append(Part(f"capacity {human_bytes(capacity)}", f"cap {human_bytes(capacity)}", keep=3))
        if mem is None:
            predicted = model.started.budget.predicted if model.started else None
            if predicted is None and budget is None:
                only = model.started is not None and model.started.budget.source == "measured"
                return f"[$text-muted]no memory sample yet{' · measured only' if only else ''}[/]"
            pred = [Part(f"pred {human_bytes(predicted)}", keep=6)] if predicted else []
            return gauge(width, None, predicted, budget, capacity), pred + limits + [
                Part("[$text-muted]not measured yet[/]", keep=1)]
        measured = mem.peak or mem.allocated
        extra = {k: v for k, v in (("rss", getattr(mem, "rss", None)),) if isinstance(v, (int, float)) and v}
        if not any((measured, mem.reserved, mem.nvml_used, mem.predicted, budget, *extra.values())):
            return f"[$text-muted]{escape(mem.device)}: memory is not measured[/]"
        cls = fit_class(measured, budget)
        parts = accuracy_parts(measured, mem.predicted, cls)
        if mem.predicted is None and model.started is not None and model.started.budget.source == "measured":
            # nothing could predict this run's step (its log says why): say so rather than leave a blank
            parts.append(Part("[$text-muted]measured only[/]", keep=4))
        parts += rank_parts(model) + limits
        parts += [Part(f"{name} {human_bytes(value)}", keep=2 if name == "rss" else 3, alone=i == 0)
                  for i, (name, value) in enumerate(
                      (n, v) for n, v in (("alloc", mem.allocated), ("reserved", mem.reserved),
                                          ("ctx", getattr(mem, "context", None)), ("nvml", mem.nvml_used),
                                          ("drv", getattr(mem, "nvml_reserved", None)), *extra.items()) if v)]
        if mem.breakdown:
            top = sorted(mem.breakdown.items(), key=lambda kv: -(kv[1] or 0))[:3]
            parts.append(Part("[$text-muted]pred: " + " · ".join(f"{escape(str(k))} {human_bytes(v)}"
                                                                  for k, v in top) + "[/]", keep=1, alone=True))
        return gauge(width, measured, mem.predicted, budget, capacity), parts


def rank_parts(model) -> list[Part]:
    """A distributed run's measured peak per rank ("ranks 29.4 · 29.6 MiB"), set against the per-rank
    prediction the accuracy line shows."""
    ranks = getattr(model, "ranks", None)
    if ranks is None:
        return []
    peaks = [r.get("peak") for r in sorted(ranks.ranks, key=lambda r: r.get("rank", 0))]
    if not any(peaks):
        return []
    texts = [human_bytes(p) if p else "–" for p in peaks]
    unit = texts[-1].split(" ")[-1] if texts[-1] != "–" else ""
    same = all(t == "–" or t.endswith(" " + unit) for t in texts)
    shown = " · ".join(t.split(" ")[0] if same and t != "–" else t for t in texts) + (f" {unit}" if same else "")
    return [Part(f"rank peaks {shown}", f"ranks {shown}", keep=5, alone=True)]


def error_percent(measured: float | None, predicted: float | None) -> float | None:
    """How far the prediction is from the measurement, in % of the measurement (+: predicted more)."""
    if not measured or not predicted:
        return None
    return (predicted - measured) / measured * 100.0


def accuracy_parts(measured: int | None, predicted: int | None, cls: str = "unknown") -> list[Part]:
    """meas · pred · err as parts: predicted against measured; only the numbers that exist."""
    parts = []
    meas_text, pred_text = human_bytes(measured), human_bytes(predicted)
    if measured and predicted and meas_text.split(" ")[1] == pred_text.split(" ")[1]:
        meas_text = meas_text.split(" ")[0]  # one unit for both: "meas 2.02 · pred 2.05 GiB" fits 80 columns
    if measured:
        parts.append(Part(f"[{FIT_COLOR[cls]}]meas {meas_text}[/]", keep=6, alone=True))
    if predicted:
        parts.append(Part(f"[$primary]pred {pred_text}[/]", keep=6))
    err = error_percent(measured, predicted)
    if err is not None:
        colour = "$success" if abs(err) <= 10 else ("$warning" if abs(err) <= 25 else "$error")
        parts.append(Part(f"[{colour}]err [b]{err:+.1f} %[/b][/]", keep=6))
    elif predicted and not measured:
        parts.append(Part("[$text-muted]not measured yet[/]", keep=1))
    return parts


def accuracy_line(measured: int | None, predicted: int | None, cls: str = "unknown") -> str:
    """"meas 1.23 · pred 1.30 GiB · err +5.7 %": predicted against measured; only the numbers that exist."""
    return " · ".join(p.text for p in accuracy_parts(measured, predicted, cls))
