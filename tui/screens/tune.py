"""The tune modal: change batch size, attention backend/chunk and LR of the running job.

As values change it shows the estimator's predicted peak against the budget,
and a grid of batch sizes × attention choices coloured fits / tight / won't
fit, so a user sees what will be refused before sending it. Apply sends one
``set`` request per changed value, in order, and shows each ack: applied, or
refused with the engine's reason (the engine re-checks the budget itself;
the grid is advice). Estimates are cached per setting, so typing costs one
estimator call per new value.
"""

from __future__ import annotations

from typing import Any, Callable

from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Label, Select, Static

from engine.control import Request, RequestError, set_value
from engine.events import Refused, SettingChanged
from tui.estimate import EstimateError, predict
from tui.format import human_bytes, short_float
from tui.widgets.memory import FIT_COLOR, fit_class

#: Attention backends the config accepts (engine.config.ModelConfig.attn_backend).
BACKENDS = ("sdpa", "math", "chunked")
#: Text fields: setting → widget id.
_INPUTS = {"batch_size": "#tune-batch", "attn_chunk": "#tune-chunk", "lr": "#tune-lr"}
#: Every setting this modal edits (the app gives it their current values).
EDITS = ("batch_size", "attn_backend", "attn_chunk", "lr")
#: Batch multipliers shown in the grid around the current batch size.
GRID_FACTORS = (0.25, 0.5, 1, 2, 4)


class ForceBox(Checkbox, inherit_bindings=False):
    """The force checkbox: space (or a click) ticks it; enter applies the form, as in every other field
    (Checkbox's own enter binding toggled it, so enter un-ticked the force it was meant to send)."""

    BINDINGS = [Binding("space", "toggle_button", "toggle", show=False)]


class TuneScreen(ModalScreen[None]):
    """Edit settings with a live memory estimate; enter applies, escape closes."""

    BINDINGS = [Binding("escape", "close", "close"), Binding("ctrl+s", "apply", "apply"),
                Binding("enter", "apply", "apply", show=False)]

    def __init__(self, current: dict[str, Any], config: dict, budget: int | None,
                 estimator: Callable | None, send: Callable[[list[Request], str], None]) -> None:
        super().__init__()
        self.current = dict(current)
        self.config = config
        self.budget = budget
        self.estimator = estimator
        self.send = send
        self._cache: dict[tuple, tuple[int, dict] | str] = {}
        #: Request id → (setting, value) for requests sent from this screen.
        self.pending: dict[str, tuple[str, Any]] = {}
        #: One line per answered request (tests assert on it).
        self.results: list[str] = []
        self._shown: dict[str, str] = {}

    def compose(self):
        c = self.current
        backend = c.get("attn_backend") if c.get("attn_backend") in BACKENDS else "sdpa"
        with Vertical(classes="dialog wide", id="tune-dialog"):
            yield Static("[b]Tune the running job[/b]", classes="dialog-title")
            with Grid(id="tune-fields"):
                yield Label("batch size")
                yield Input(str(c.get("batch_size") or ""), id="tune-batch", type="integer", compact=True)
                yield Label("attention")
                yield Select([(b, b) for b in BACKENDS], value=backend, allow_blank=False, id="tune-backend",
                             compact=True)
                yield Label("chunk")
                yield Input(str(c.get("attn_chunk") or ""), id="tune-chunk", type="integer", compact=True)
                yield Label("learning rate")
                yield Input(short_float(c.get("lr"), 6) if c.get("lr") else "", id="tune-lr", type="number",
                            compact=True)
            yield ForceBox("force: skip the engine's budget check", id="tune-force")
            yield Static("", id="tune-estimate")
            yield Static("", id="tune-grid")
            yield Static("", id="tune-results")
            yield Static("[$text-muted]enter apply · esc close · tab next field[/]", classes="dialog-hint")

    def on_mount(self) -> None:
        self._shown = {key: self.query_one(widget_id, Input).value.strip() for key, widget_id in _INPUTS.items()}
        self.refresh_estimate()

    # ------------------------------------------------------------ values
    def values(self) -> tuple[dict[str, Any], list[str]]:
        """The form's values (parsed) and one error line per field that does not parse."""
        out: dict[str, Any] = {}
        errors: list[str] = []
        for key, widget_id, kind in (("batch_size", "#tune-batch", int), ("attn_chunk", "#tune-chunk", int),
                                     ("lr", "#tune-lr", float)):
            raw = self.query_one(widget_id, Input).value.strip()
            if not raw:
                continue
            try:
                value = kind(raw)
            except ValueError:
                errors.append(f"{key}: {raw!r} is not a {'whole number' if kind is int else 'number'}")
                continue
            if value <= 0:
                errors.append(f"{key}: must be > 0, got {raw}")
                continue
            out[key] = value
        out["attn_backend"] = self.query_one("#tune-backend", Select).value
        return out, errors

    def changes(self) -> dict[str, Any]:
        """Settings the user edited to a value different from the running job's.

        A field whose text is still what the screen first showed is not a
        change: the LR is shown rounded, and re-sending it would reset it.
        """
        values, _ = self.values()
        edited = {key for key, widget_id in _INPUTS.items()
                  if self.query_one(widget_id, Input).value.strip() != self._shown.get(key)}
        edited.add("attn_backend")
        return {k: v for k, v in values.items() if k in edited and v != self.current.get(k)}

    # ---------------------------------------------------------- estimate
    def _estimate(self, batch_size: int, backend: str, chunk: int | None) -> tuple[int, dict] | str:
        key = (batch_size, backend, chunk)
        if key not in self._cache:
            try:
                self._cache[key] = predict(self.estimator, self.config, batch_size=batch_size,
                                           attn_backend=backend, attn_chunk=chunk)
            except EstimateError as exc:
                self._cache[key] = str(exc)
        return self._cache[key]

    def refresh_estimate(self) -> None:
        """Recompute the predicted peak line and the grid for the form's values."""
        values, errors = self.values()
        estimate = self.query_one("#tune-estimate", Static)
        if errors:
            estimate.update("[$error]" + escape("; ".join(errors)) + "[/]")
        batch = values.get("batch_size") or self.current.get("batch_size") or 1
        chunk = values.get("attn_chunk") or self.current.get("attn_chunk")
        backend = values["attn_backend"]
        if not errors:
            result = self._estimate(batch, backend, chunk)
            if isinstance(result, str):
                estimate.update(f"[$text-muted]predicted peak: {escape(result)}[/]")
            else:
                total, breakdown = result
                cls = fit_class(total, self.budget)
                verdict = {"fits": "fits", "tight": "tight", "over": "won't fit", "unknown": "no budget known"}[cls]
                share = f" ({100 * total / self.budget:.0f} %)" if self.budget else ""
                top = " · ".join(f"{k} {human_bytes(v)}" for k, v in
                                 sorted(breakdown.items(), key=lambda kv: -(kv[1] or 0))[:3])
                estimate.update(f"predicted peak [{FIT_COLOR[cls]}][b]{human_bytes(total)}[/b][/] of budget "
                                f"{human_bytes(self.budget)}{share}: [{FIT_COLOR[cls]}]{verdict}[/]"
                                + (f"\n[$text-muted]{escape(top)}[/]" if top else ""))
        self.query_one("#tune-grid", Static).update(self.grid_markup(batch, backend, chunk))

    def grid_markup(self, batch: int, backend: str, chunk: int | None) -> str:
        """Batch sizes × attention choices, each cell the predicted peak coloured by fit."""
        if self.estimator is None:
            return "[$text-muted]no memory estimator available: the grid needs engine.budget.analytic[/]"
        base = self.current.get("batch_size") or batch
        sizes = sorted({max(1, int(base * f)) for f in GRID_FACTORS} | {batch})
        columns = [("sdpa", None), ("math", None), ("chunked", chunk)]
        head = f"{'batch':>7} " + "".join(f"{(b if c is None else f'{b} {c}'):>14}" for b, c in columns)
        lines = [f"[b]{head}[/b]"]
        for size in sizes:
            cells = []
            for col_backend, col_chunk in columns:
                result = self._estimate(size, col_backend, col_chunk if col_chunk is not None else chunk)
                if isinstance(result, str):
                    cells.append(f"{'?':>14}")
                    continue
                text = human_bytes(result[0])
                if size == batch and col_backend == backend:
                    text = f"▶{text}"
                cells.append(f"[{FIT_COLOR[fit_class(result[0], self.budget)]}]{text:>14}[/]")
            lines.append(f"{size:>7} " + "".join(cells))
        lines.append("[$success]fits[/] ≤ 85 % · [$warning]tight[/] ≤ 100 % · [$error]won't fit[/] of budget "
                     f"{human_bytes(self.budget)}")
        return "\n".join(lines)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.refresh_estimate()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.refresh_estimate()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_apply()

    # ------------------------------------------------------------- apply
    def action_apply(self) -> None:
        """Send one set request per changed, valid value (in order); acks arrive via ``show_result``."""
        values, errors = self.values()
        results = self.query_one("#tune-results", Static)
        if errors:
            results.update("[$error]fix first: " + escape("; ".join(errors)) + "[/]")
            return
        changes = self.changes()
        if not changes:
            results.update("[$text-muted]nothing changed[/]")
            return
        force = self.query_one("#tune-force", Checkbox).value
        requests = []
        for name in ("batch_size", "attn_backend", "attn_chunk", "lr"):
            if name in changes:
                try:
                    request = set_value(name, changes[name], force=force)
                except RequestError as exc:
                    results.update(f"[$error]{escape(str(exc))}[/]")
                    return
                self.pending[request.id] = (name, changes[name])
                requests.append(request)
        results.update("[$accent]sent: " + escape(", ".join(f"{n}={v}" for n, v in changes.items())) + "…[/]")
        self.send(requests, "tune")

    def show_result(self, request: Request, ack, error: str | None) -> None:
        """An answer for a request sent from here: applied, refused (with why) or failed."""
        if request.id not in self.pending:
            return
        name, value = self.pending.pop(request.id)
        if isinstance(ack, SettingChanged):
            self.current[name] = ack.new
            line = f"[$success]{name} {ack.old} → {ack.new}: applied[/]"
        elif isinstance(ack, Refused):
            line = f"[$error]{name} → {value}: refused — {escape(ack.why)}[/]"
        else:
            line = f"[$error]{name} → {value}: failed — {escape(error or 'no answer')}[/]"
        self.results.append(line)
        self.query_one("#tune-results", Static).update("\n".join(self.results[-4:]))
        self.refresh_estimate()

    def action_close(self) -> None:
        """Close the modal (requests already sent still get their acks in the log)."""
        self.dismiss(None)
