"""Fit a row of labelled numbers into a width: labels are abbreviated before values, whole parts before cuts.

Every panel line and chart title is a few parts ("step 200/240", "ETA 15s",
"best score 17.1 dB @ 160") that a narrow terminal used to cut at its edge, so
the number that mattered (an error %, an MFU, a guide's value) was the part
lost. ``fit`` packs parts into at most ``lines`` rows of ``width`` cells:

1. each part as it is, joined with " · ", flowing onto the next row;
2. if that does not fit, every part in its short form (the label abbreviated:
   "capacity" → "cap", "steps/s" → "it/s"; the value never changes);
3. then the parts with the lowest ``keep`` go, one at a time, newest first;
4. a part longer than a whole row is the only thing ever cut (with "…").

Markup is measured as it will render (Textual's Content: ``$theme``
variables, no escapes counted), so colour costs no width.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content

SEPARATOR = " · "


@dataclass(frozen=True)
class Part:
    """One labelled value: its markup, its short form (None: no shorter), and how hard it is kept (higher: longer).

    ``alone`` starts a new row when the part is not the first (a group that reads as one: meas · pred · err).
    """

    text: str
    short: str | None = None
    keep: int = 1
    alone: bool = False


def cells(markup: str) -> int:
    """Terminal cells ``markup`` takes when rendered."""
    return Content.from_markup(markup).cell_length


def _pack(texts: list[tuple[str, bool]], width: int) -> list[str]:
    rows: list[tuple[str, int]] = []
    for text, alone in texts:
        size = cells(text)
        if rows and not alone and rows[-1][1] + len(SEPARATOR) + size <= width:
            row, used = rows[-1]
            rows[-1] = (row + SEPARATOR + text, used + len(SEPARATOR) + size)
        else:
            rows.append((text, size))
    return [row for row, _ in rows]


def fit(parts: list[Part], width: int, lines: int = 1) -> list[str]:
    """The rows (markup) showing as much of ``parts`` as fits ``lines`` rows of ``width`` cells (module docstring)."""
    parts = [p for p in parts if p.text]
    if not parts:
        return []
    rows = _pack([(p.text, p.alone) for p in parts], width)
    if len(rows) <= lines and all(cells(r) <= width for r in rows):
        return rows
    kept = list(parts)
    while True:
        rows = _pack([(p.short or p.text, p.alone) for p in kept], width)
        if (len(rows) <= lines and all(cells(r) <= width for r in rows)) or len(kept) == 1:
            return rows[:lines]
        lowest = min(p.keep for p in kept)
        drop = max(i for i, p in enumerate(kept) if p.keep == lowest)
        kept.pop(drop)
