"""Header: run name, task/preset, parameter count, device, and the state badge."""

from __future__ import annotations

from textual.containers import Horizontal
from textual.markup import escape
from textual.widgets import Static

from tui.model.format import human_count

#: Badge text per run state (a process gone without finishing shows CRASHED, as ``runs`` says it; one there whose
#: heartbeat stopped shows STALLED with its silence in seconds).
BADGES = {"starting": "STARTING", "running": "RUNNING", "paused": "PAUSED", "checkpointing": "CHECKPOINTING",
          "aborting": "ABORTING", "finished": "FINISHED", "aborted": "ABORTED", "failed": "FAILED",
          "crashed": "CRASHED", "stalled": "STALLED"}


class RunHeader(Horizontal):
    """One line: what is training where (left) and its state badge (right, coloured by CSS class)."""

    area = "header"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._seen = -1
        self._shown: tuple = ()

    def compose(self):
        yield Static("sensorlm-tui · connecting…", id="header-title")
        yield Static("CONNECTING", id="header-badge", classes="state-starting")

    def update_from(self, model, force: bool = False) -> bool:
        """Repaint title and badge if they changed."""
        version = model.versions[self.area]
        if not force and version == self._seen:
            return False
        self._seen = version
        title, badge, state = self.content(model)
        if (title, badge) == self._shown and not force:
            return False
        self._shown = (title, badge)
        self.query_one("#header-title", Static).update(title, layout=False)  # fixed 1fr: no layout pass
        badge_widget = self.query_one("#header-badge", Static)
        badge_widget.update(badge)
        badge_widget.set_classes(f"state-{state}")
        return True

    @staticmethod
    def content(model) -> tuple[str, str, str]:
        """(title markup, badge text, state for the CSS class)."""
        s = model.started
        if s is None:
            where = "connecting…" if model.connection == "connecting" else escape(model.connection)
            title = f"[b]sensorlm-tui[/b] · {where}"
        else:
            named = s.device_name and not s.device_name.lower().startswith(s.device.lower())
            device = f"{s.device} · {s.device_name}" if named else (s.device_name or s.device)
            title = (f"[b]{escape(s.name or 'run')}[/b] · {escape(s.task)}/{escape(s.preset)} · "
                     f"{human_count(s.params)} params · {escape(device)}")
            if model.resumed_from_step is not None:
                title += f" · resumed from step {model.resumed_from_step}"
        if model.read_only:
            title += " · [$warning]read-only[/]"
        state = model.state
        if model.liveness == "crashed" and state not in ("finished", "aborted", "failed"):
            state = "crashed"
        elif model.stall is not None and state not in ("finished", "aborted", "failed", "crashed"):
            state = "stalled"
        elif model.connection.startswith("failed") and s is None:
            state = "failed"
        badge = BADGES.get(state, state.upper())
        if state == "stalled" and model.stall.silent_s() is not None:
            badge += f" {model.stall.silent_s():.0f}s"
        if model.started is None and model.connection == "connecting":
            badge = "CONNECTING"
        return title, f" {badge} ", state
