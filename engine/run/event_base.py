"""The base of every training event: a frozen dataclass of plain values with a wall-clock time.

Its own module so that groups of events can live beside engine.run.events (which
holds the common ones, the type table and the JSON form) without an import cycle:
a group imports this base, and engine.run.events imports the group. Torch-free.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class Event:
    """Base of every event; ``t`` is the wall-clock time it was made (seconds since the epoch)."""

    type: ClassVar[str] = "event"
    t: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: ``type`` first, then the fields."""
        out: dict[str, Any] = {"type": self.type}
        out.update(dataclasses.asdict(self))
        return out
