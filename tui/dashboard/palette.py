"""Command palette (ctrl+p): "run: …", "tune: …", "view: …" and "theme: …" commands."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

import themes


class DashboardCommands(Provider):
    """The dashboard's actions by name, so every key also has a searchable, self-describing command."""

    def _commands(self) -> list[tuple[str, object, str]]:
        app = self.app
        out = [
            ("run: pause / resume", app.action_toggle_pause, "pause after the step in flight, or continue"),
            ("run: checkpoint now", app.action_checkpoint, "write a checkpoint at the next step boundary"),
            ("run: abort gracefully", partial(app.abort_with, "graceful"), "checkpoint, then stop the run"),
            ("run: abort now", partial(app.abort_with, "now"), "stop at once, no new checkpoint"),
            ("tune: batch size, learning rate, the task's settings…", app.action_tune,
             "change settings with the engine's memory prediction"),
            ("view: toggle log-y", app.action_toggle_log_y, "log-scaled loss axis"),
            ("view: cycle smoothing", app.action_cycle_smoothing, "EMA weight of the loss curve"),
            ("view: recent / full history", app.action_toggle_window, "last 1000 steps or the whole run"),
            ("view: zoom in", partial(app.action_chart, "zoom", 0.5), "half the steps, down to single steps (+)"),
            ("view: zoom out", partial(app.action_chart, "zoom", 2.0), "twice the steps, up to the whole run (-)"),
            ("view: pan earlier", partial(app.action_chart, "pan", -0.25), "a quarter of the window back (←)"),
            ("view: pan later", partial(app.action_chart, "pan", 0.25), "a quarter of the window forward (→)"),
            ("view: first steps", partial(app.action_chart, "to_edge", True), "the run's start, same zoom (home)"),
            ("view: newest steps", partial(app.action_chart, "to_edge", False), "follow the run, same zoom (end)"),
            ("view: reset zoom", partial(app.action_chart, "reset_view"), "the last 1000 steps or full history (0)"),
            ("view: choose a chart's metric", app.action_choose_metric, "any logged scalar in any chart"),
            ("view: compare with another run", app.action_pick_compare, "overlay its curves, aligned by step"),
            ("view: next chart (narrow layout)", app.action_next_chart, "switch charts below 100 columns"),
            ("view: help", app.action_help, "every key and what it does"),
        ]
        if getattr(app, "detachable", False):
            out.append(("run: detach", app.detach, "close the dashboard; the engine keeps training"))
        for short, full in themes.ALIASES.items():
            out.append((f"theme: {short}", partial(app.set_theme, full), f"switch to the {short} theme"))
        return out

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
