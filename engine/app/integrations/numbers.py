"""The numbers a user's loop hands the cockpit, read without ever raising into their training.

``run.step(loss=..., **metrics)``, ``run.eval(...)``, Lightning's logged
metrics and the transformers Trainer's ``logs`` may hold anything: a string, a
list, a tensor of several elements, an int too large for a float. The engine
decides what its own tasks log; here the user does, and a value the cockpit
cannot show must cost them nothing but the value: it is dropped, and the
reader says so once per name (a metric that turns bad mid-run would otherwise
kill the run at a random logged step, or fill the log with the same line).

A number is a real (``int``, ``float``, numpy's scalars, not ``bool``) that
fits a float, or a tensor or array of exactly one real element (read with
``.item()``: one device sync, as the caller already pays for a logged step).
NaN and infinities are numbers: a diverged loss is worth showing.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

#: Longest text of an unreadable value quoted in its warning.
SHOWN = 40


def as_float(value: Any) -> tuple[float | None, str]:
    """(``value`` as a float, "") or (None, what it is instead) — never raises."""
    if isinstance(value, bool) or value is None:
        return None, "a bool" if value is not None else "None"
    try:
        count = _elements(value)
        if count is not None:
            if count != 1:
                return None, f"a {type(value).__name__} of {count} elements"
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None, f"a {type(value).__name__} ({_shown(value)})"
        return float(value), ""
    except OverflowError:
        return None, f"an {type(value).__name__} too large for a float ({_shown(value)})"
    except Exception as exc:  # a tensor whose read fails, an object whose __float__ raises: not the user's run's end
        return None, f"a {type(value).__name__} that cannot be read ({type(exc).__name__})"


def _elements(value: Any) -> int | None:
    """How many elements a tensor or array holds (None for anything else)."""
    numel = getattr(value, "numel", None)
    if callable(numel) and hasattr(value, "item"):  # torch.Tensor
        return int(numel())
    size = getattr(value, "size", None)
    if isinstance(size, int) and hasattr(value, "item") and hasattr(value, "dtype"):  # numpy array or scalar
        return size
    return None


def _shown(value: Any) -> str:
    """A short, printable text of a value (control characters escaped, long ones cut)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**SHOWN:
        return f"{len(str(abs(value)))} digits"
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


class Numbers:
    """Reads named values for one run; the first unreadable value of each name is said once through ``warn``."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.warn = warn
        #: Names whose unreadable value was already said.
        self.dropped: set[str] = set()

    def read(self, name: str, value: Any) -> float | None:
        """``value`` as a float, or None (dropped: said once for ``name``)."""
        number, why = as_float(value)
        if number is None and name not in self.dropped:
            self.dropped.add(name)
            self.warn(f"metric {_shown(name)}: {why} is not a number the cockpit can show; dropped "
                      "(said once for this name)")
        return number

    def read_all(self, values: dict) -> dict[str, float]:
        """The readable entries of ``values`` as floats (the others dropped, each name said once)."""
        out = {}
        for name, value in values.items():
            number = self.read(str(name), value)
            if number is not None:
                out[str(name)] = number
        return out

    def loss(self, value: Any) -> float:
        """The step's loss: NaN when there is none or it cannot be read (a step event always has a loss)."""
        if value is None:
            return math.nan
        number = self.read("loss", value)
        return math.nan if number is None else number
