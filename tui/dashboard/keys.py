"""Which keys act now, for the footer and the key dispatch: the dashboard's state decides, not its code paths.

The footer shows the keys that do something in the current state (a key whose
action is inactive is hidden, and a hidden twin binding says why it does
nothing, or does the same at a width where the footer has no room for it):

- control keys only while this viewer may steer a connected run, pause xor
  resume by the state;
- the chart toggles from the width the footer has room for them, ``v`` only
  where one chart shows at a time;
- ``q`` reads "detach" when the engine keeps running after it, "quit" when not;
- ``^c`` "stop" while Ctrl-C stops something (the run, or the engine that is
  starting).
"""

from __future__ import annotations

from typing import NamedTuple

from tui.dashboard.watch import Watch
from tui.screens.dashboard import CONTROL_ACTIONS, WIDE_ACTIONS, WIDE_FROM

#: From this width the footer also shows ^p (the command palette; the help lists it at every width).
PALETTE_FROM = 140


class KeyState(NamedTuple):
    """Everything that decides which keys act now; the footer is refreshed when it changes."""

    state: str
    controllable: bool
    will_detach: bool
    stoppable: bool
    #: How many of the footer's width thresholds the terminal reaches (the exact width does not matter).
    widths: int
    liveness: str | None

    @property
    def palette(self) -> bool:
        """True when the footer has room for ^p."""
        return self.widths > _THRESHOLDS.index(PALETTE_FROM)


_THRESHOLDS = sorted({*WIDE_ACTIONS.values(), WIDE_FROM, PALETTE_FROM})


def key_state(watch: Watch, width: int) -> KeyState:
    """What the keys depend on now, for a terminal ``width`` columns wide."""
    return KeyState(watch.model.state, watch.controllable, watch.will_detach, watch.stoppable,
                    sum(width >= w for w in _THRESHOLDS), watch.model.liveness)


def key_active(keys: KeyState, action: str) -> bool | None:
    """``App.check_action`` of the dashboard: False hides the binding (and its key falls through)."""
    if action in CONTROL_ACTIONS and not keys.controllable:
        return False
    if action == "pause":
        return keys.state != "paused"
    if action == "resume":
        return keys.state == "paused"
    if action in WIDE_ACTIONS:
        return keys.widths > _THRESHOLDS.index(WIDE_ACTIONS[action])
    if action == "next_chart":
        return keys.widths <= _THRESHOLDS.index(WIDE_FROM)
    if action == "detach_key":
        return keys.will_detach
    if action == "quit_key":
        return not keys.will_detach
    if action == "interrupt":
        return keys.stoppable
    return True
