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

from tui.screens.dashboard import CONTROL_ACTIONS, WIDE_ACTIONS, WIDE_FROM


def key_active(app, action: str) -> bool | None:
    """``App.check_action`` of the dashboard ``app``: False hides the binding (and its key falls through)."""
    if action in CONTROL_ACTIONS and not app.controls.controllable:
        return False
    if action == "pause":
        return app.model.state != "paused"
    if action == "resume":
        return app.model.state == "paused"
    if action in WIDE_ACTIONS:
        return app.size.width >= WIDE_ACTIONS[action]
    if action == "next_chart":
        return app.size.width < WIDE_FROM
    if action == "detach_key":
        return app.lifecycle.will_detach
    if action == "quit_key":
        return not app.lifecycle.will_detach
    if action == "interrupt":
        return app.lifecycle.stoppable
    return True


def footer_state(app) -> tuple:
    """Everything ``key_active`` reads: the footer is refreshed when it changes."""
    widths = sum(app.size.width >= w for w in {*WIDE_ACTIONS.values(), WIDE_FROM, 140})  # 140: ^p palette
    return (app.model.state, app.controls.controllable, app.lifecycle.will_detach, app.lifecycle.stoppable, widths,
            app.model.liveness)
