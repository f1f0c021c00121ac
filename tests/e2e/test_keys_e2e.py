"""Keys as a real terminal delivers them: a burst typed into every number field of the tune modal arrives in one
read, and each field must end up holding what was typed (tui.widgets.fields says why it did not)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.e2e.tmux import Tmux, needs_tmux

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

#: Each number field's label as the modal shows it (the demo run: the engine's three and the task's window).
FIELDS = {"batch_size": "batch size 1..1000000", "grad_accum": "grad accum 1..4096", "lr": "learning rate >0..10",
          "window": "window 1..4096"}


def _values(text: str) -> dict[str, str]:
    out = {}
    for name, label in FIELDS.items():
        found = re.search(re.escape(label) + r" +(\S+)", text)
        out[name] = found.group(1) if found else ""
    return out


def test_a_burst_of_keys_in_every_number_field_is_what_was_typed(tmp_path: Path, tmux: Tmux) -> None:
    tmux.start("keys", [sys.executable, "-m", "tests.e2e.scripted_app"])
    tmux.wait_for("keys", lambda s: "step 300/1000" in s, 60, "the scripted run on screen")
    tmux.keys("keys", "t")
    shown = tmux.wait_for("keys", lambda s: "Tune the running job" in s, 30, "the tune modal")
    assert _values(shown) == {"batch_size": "32", "grad_accum": "1", "lr": "0.002", "window": "256"}
    edit = ["End", "BSpace", "BSpace", "6", "4", "BSpace", "5"]  # two off the end, 64, the 4 replaced by 5
    # One send-keys: tmux writes them to the pane at once, and the app reads them together. The kernel choice
    # sits between the LR and the window in the focus order: two Tabs there.
    tmux.keys("keys", *edit, "Tab", *edit, "Tab", *edit, "Tab", "Tab", *edit)
    expected = {"batch_size": "65", "grad_accum": "65", "lr": "0.065", "window": "265"}
    tmux.wait_for("keys", lambda s: _values(s) == expected, 10, f"the fields to read {expected}")
    tmux.wait_for("keys", lambda s: "window → 265: fits" in s, 10, "the engine's verdict on what was typed")
    # On to the force checkbox, where Backspace and 7 do nothing; round to the batch size (selected as it takes
    # the focus), then the grad accumulation: each key acts where it was typed.
    tmux.keys("keys", "Tab", "BSpace", "7", "Tab", "BSpace", "7", "Tab", "End", "BSpace", "BSpace", "BSpace", "1",
              "2")
    expected = {**expected, "batch_size": "7", "grad_accum": "12"}
    tmux.wait_for("keys", lambda s: _values(s) == expected, 10, f"the fields to read {expected}")
