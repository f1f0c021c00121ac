"""A Session that replays scripted events and answers controls by a policy: no engine, no torch.

Used by the Pilot and snapshot tests and for demoing the dashboard. It behaves
like the real engine where a viewer can tell: every control is answered with a
SettingChanged or Refused carrying the request id (a dry-run ``set``: a
Prediction from ``memory``, judged exactly like the real request), the ack
also appears in the event stream, and pause / checkpoint / abort produce the StateChanged,
CheckpointSaved and RunFinished events the Trainer emits (engine/training/loop.py).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from engine.run import events as ev
from engine.run.control.requests import Request
from engine.run.control.session import Session, SessionError

#: A policy turns a request into (ack, follow-up events); ``session`` gives the current step and state.
Policy = Callable[[Request, "ScriptedSession"], tuple[ev.Event, list[ev.Event]]]


class ScriptedSession(Session):
    """Replays ``events`` one per ``interval`` seconds (0 = all at the first poll) after ``history``.

    ``sent`` records every Request; ``push`` injects events from a test;
    ``closed`` is set by ``close``. ``refuse`` maps a setting name or an action
    to the reason the default policy refuses it with. ``memory`` predicts the
    peak bytes of a settings dict; the default policy judges memory-moving
    changes by it against RunStarted's budget (None: nothing is predicted).
    """

    def __init__(self, events: Iterable[ev.Event] = (), *, history: Iterable[ev.Event] = (),
                 interval: float = 0.0, policy: Policy | None = None, refuse: dict[str, str] | None = None,
                 read_only: bool = False, detachable: bool | None = None, run_dir: str | Path | None = None,
                 liveness: str = "live", ack_delay: float = 0.0,
                 memory: Callable[[dict], int] | None = None) -> None:
        self._history = list(history)
        self._script: deque[ev.Event] = deque(events)
        self.interval = interval
        self.policy = policy or accept_policy
        self.refuse = dict(refuse or {})
        self.read_only = read_only
        self._detachable = detachable
        self._run_dir = Path(run_dir) if run_dir is not None else None
        self._liveness = liveness
        self.ack_delay = ack_delay
        self.memory = memory
        #: The budget RunStarted reported (bytes), what ``memory`` predictions are judged against.
        self.budget: int | None = None
        #: Every request sent, in order.
        self.sent: list[Request] = []
        #: Set once close() was called.
        self.closed = threading.Event()
        #: How many times history() was called (the dashboard calls it once).
        self.history_calls = 0
        self._injected: deque[ev.Event] = deque()
        self._cond = threading.Condition()
        self._next_due = time.monotonic()
        self.step = 0
        self.state = "starting"
        self.last_checkpoint: str | None = None
        #: Current value of each setting, as the engine would report it in an ack's ``old``.
        self.settings: dict = {}
        #: The autotune search running (its AutotuneStarted), None when none runs.
        self.autotune: ev.AutotuneStarted | None = None
        #: Timestamp of the newest event seen; answers are stamped from it, so a replayed run's
        #: clock (demo_run's synthetic one) never jumps to the wall clock.
        self.last_t: float | None = None
        for event in self._history:
            self._observe(event)

    # ------------------------------------------------------------- Session API
    @property
    def detachable(self) -> bool:
        """As told (``detachable=``), else as any session with a run directory."""
        return super().detachable if self._detachable is None else self._detachable

    def history(self, steps: bool = True, newest=None, columns=None) -> list[ev.Event]:
        """The scripted history (returned whole, as a run's events.jsonl would be; ``newest`` allows less)."""
        self.history_calls += 1
        return list(self._history)

    def poll(self, timeout: float = 0.1) -> list[ev.Event]:
        """Injected events first, then scripted events that are due; waits up to ``timeout`` for one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                out = list(self._injected)
                self._injected.clear()
                now = time.monotonic()
                while self._script and (self.interval <= 0 or now >= self._next_due):
                    out.append(self._script.popleft())
                    self._next_due = max(self._next_due, now) + self.interval
                    if self.interval > 0:
                        break
                for event in out:
                    self._observe(event)
                if out:
                    return out
                wait = deadline - now
                if wait <= 0:
                    return []
                if self._script:
                    wait = min(wait, max(0.0, self._next_due - now))
                self._cond.wait(wait)

    def send(self, request: Request, timeout: float = 5.0) -> ev.Event:
        """Record the request and answer per the policy; the ack and follow-ups also enter the stream."""
        if self.read_only and not request.dry_run:
            raise SessionError("read-only session: controls are disabled")
        if self.closed.is_set():
            raise SessionError("session closed")
        self.sent.append(request)
        if self.ack_delay:
            time.sleep(self.ack_delay)
        ack, follow = self.policy(request, self)
        self.push(ack, *follow)
        return ack

    def liveness(self) -> str:
        """live until a RunFinished went by, then its status (finished / aborted / failed)."""
        return self._liveness

    def run_dir(self):
        """The run directory given at construction (a Path), or None."""
        return self._run_dir

    def close(self) -> None:
        """Stop: later sends raise SessionError."""
        self.closed.set()
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------- test helpers
    def push(self, *events: ev.Event) -> None:
        """Inject events; the next poll returns them."""
        with self._cond:
            self._injected.extend(events)
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Scripted events not yet released."""
        return len(self._script)

    def now(self) -> float:
        """The time to stamp an answer with: just after the newest event seen (wall clock before any)."""
        return time.time() if self.last_t is None else self.last_t + 0.001

    def _observe(self, event: ev.Event) -> None:
        self.last_t = max(self.last_t or event.t, event.t)
        if isinstance(event, ev.StepLogged):
            self.step = event.step
        elif isinstance(event, ev.RunStarted):
            self.step, self.state = event.start_step, "running"
            for key, section in event.config.items():
                if key != "task" and isinstance(section, dict):
                    self.settings.update(section)
            self.budget = getattr(event.budget, "budget", None)
        elif isinstance(event, ev.SettingChanged):
            self.settings[event.name] = event.new
        elif isinstance(event, ev.StateChanged):
            self.state = event.state
        elif isinstance(event, ev.CheckpointSaved):
            self.last_checkpoint = event.path
        elif isinstance(event, ev.RunFinished):
            self._liveness = {"interrupted": "aborted"}.get(event.status, event.status)
        elif isinstance(event, (ev.AutotuneStarted, ev.AutotuneChose)):
            self.autotune = event if isinstance(event, ev.AutotuneStarted) else None


def accept_policy(request: Request, s: ScriptedSession) -> tuple[ev.Event, list[ev.Event]]:
    """Apply every control the way the Trainer does, except what ``s.refuse`` names or the budget refuses."""
    why = s.refuse.get(request.name or "") or s.refuse.get(request.action)
    if request.action == "set":
        predicted, over = _judge(request, s)
        why = why or over
        if request.dry_run:
            return ev.Prediction(name=request.name, value=request.value, predicted=predicted, budget=s.budget,
                                 fits=not why, refused=why or "", step=s.step, request_id=request.id, t=s.now()), []
        if over and request.force and not s.refuse.get(request.name or ""):
            why = None
        elif why:
            return ev.Refused(request=request.to_dict(), why=why, step=s.step, request_id=request.id, t=s.now(),
                              predicted=predicted if over else None, budget=s.budget if over else None), []
    if why:
        return ev.Refused(request=request.to_dict(), why=why, step=s.step, request_id=request.id, t=s.now()), []
    step, rid, t = s.step, request.id, s.now()
    root = str(s.run_dir() or "runs/scripted")

    def ack(name, old, new, reason=""):
        return ev.SettingChanged(name=name, old=old, new=new, reason=reason, step=step, request_id=rid, t=t)

    if request.action == "pause":
        return ack("state", "running", "paused"), [ev.StateChanged(state="paused", reason="paused by request",
                                                                   step=step, t=t)]
    if request.action == "resume":
        return ack("state", "paused", "running"), [ev.StateChanged(state="running", reason="resumed by request",
                                                                   step=step, t=t)]
    if request.action == "checkpoint_now":
        path = f"{root}/checkpoints/last.safetensors"
        return ack("checkpoint", None, path), [
            ev.StateChanged(state="checkpointing", step=step, t=t),
            ev.CheckpointSaved(step=step, path=path, kind="manual", seconds=0.42, bytes=12_345_678, request_id=rid,
                               t=t),
            ev.StateChanged(state="running", step=step, t=t)]
    if request.action == "abort":
        follow: list[ev.Event] = [ev.StateChanged(state="aborting", reason=f"abort ({request.mode})", step=step, t=t)]
        checkpoint = s.last_checkpoint
        if request.mode != "now":
            checkpoint = f"{root}/checkpoints/last.safetensors"
            follow.append(ev.CheckpointSaved(step=step, path=checkpoint, kind="final", seconds=0.5, bytes=12_345_678,
                                              t=t))
        status = "interrupted" if request.mode == "now" else "aborted"
        follow += [ev.StateChanged(state="aborted", reason="aborted by request", step=step, t=t),
                   ev.RunFinished(status=status, steps=step, reason=f"abort ({request.mode}) by request",
                                  checkpoint=checkpoint, resume_command=f"sensorlm-tui train --resume {root}",
                                  exit_code=130 if request.mode == "now" else 0, t=t)]
        return ack("state", s.state, "aborting", f"abort ({request.mode}) by request"), follow
    if request.action == "autotune":
        return _autotune(request, s), []
    if request.action == "set":
        others = [ev.SettingChanged(name=k, old=s.settings.get(k), new=v, reason=f"with {request.name}", step=step,
                                    t=t) for k, v in request.together]
        return ack(request.name, s.settings.get(request.name), request.value), others
    return ack("reserved_bytes", 0, 0, "nothing to free"), []


def _autotune(request: Request, s: ScriptedSession) -> ev.Event:
    """The engine's answers to autotune (engine.training.autotune.Autotuner.request): a search starts (this engine
    measures nothing: its candidates come only from a script), or the running one is cancelled."""
    running, rid, t = s.autotune, request.id, s.now()
    if request.mode == "cancel":
        if running is None:
            return ev.Refused(request=request.to_dict(), why="no autotune is running", step=s.step, request_id=rid,
                              t=t)
        return ev.AutotuneChose(step=s.step, status="cancelled", settings=dict(running.start), request_id=rid, t=t)
    if running is not None:
        return ev.Refused(request=request.to_dict(), why="autotune is already running (cancel it first)", step=s.step,
                          request_id=rid, t=t)
    start = {"grad_accum": s.settings.get("grad_accum", 1)}
    return ev.AutotuneStarted(step=s.step, reason="requested", start=start, space={"grad_accum": [1, 2, 4]},
                              candidates=3, budget=s.budget, request_id=rid, t=t)


def _judge(request: Request, s: ScriptedSession) -> tuple[int | None, str | None]:
    """(predicted bytes, the budget's refusal or None) for a set, by ``s.memory``; (None, None) without one."""
    if s.memory is None or set(request.changes) == {"lr"}:
        return None, None
    predicted = s.memory({**s.settings, **request.changes})
    if s.budget is None or predicted <= s.budget:
        return predicted, None
    return predicted, f"predicted peak {predicted} B is over the budget of {s.budget} B"


# ---------------------------------------------------------------- demo data
#: What the demo run's task declares (RunStarted.capabilities): a primary metric with a unit, two loss
#: components and a second validation metric. Generic on purpose: the dashboard must chart any task.
DEMO_CAPABILITIES = {
    "primary": {"name": "score", "label": "val score", "unit": "dB", "higher_is_better": True, "kind": "val"},
    "curves": [{"name": "recon", "label": "recon loss", "higher_is_better": False, "kind": "train"},
               {"name": "align", "label": "align loss", "higher_is_better": False, "kind": "train"},
               {"name": "recall_at_1", "label": "recall@1", "higher_is_better": True, "kind": "val"}],
    "settings": [{"name": "kernel", "path": "demo.kernel", "kind": "choice", "choices": ["fast", "lean"],
                  "label": "kernel", "help": "fast · lean (half the activations, slower)"},
                 {"name": "window", "path": "demo.window", "kind": "int", "minimum": 1, "maximum": 4096,
                  "label": "window", "help": "samples per window", "affects_memory": False}],
    "memory": "traced", "exports": [], "eval_reduction": "per_batch",
}


def demo_memory(settings: dict) -> int:
    """The demo task's peak bytes for a settings dict: 1 GiB plus 96 MiB a sample (half with the lean kernel)."""
    per_sample = (96 << 20) // (2 if settings.get("kernel") == "lean" else 1)
    return (1 << 30) + int(settings.get("batch_size") or 1) * per_sample


def demo_run(steps: int = 300, *, total_steps: int = 1000, eval_every: int = 50, seed: int = 0,
             t0: float = 1_700_000_000.0, step_seconds: float = 0.5, name: str = "demo-run",
             budget: int = 8 << 30, capacity: int = 16 << 30, finished: bool = False,
             task: str = "demo") -> list[ev.Event]:
    """A deterministic, plausible run: a decaying noisy loss with two components, evals with a primary metric
    ("score" in dB, higher is better), memory, system, a setting change.

    Timestamps are synthetic (``t0 + step · step_seconds``) so elapsed time and
    ETA are the same on every machine; that is what keeps snapshots stable.
    """
    rng = np.random.default_rng(seed)
    config = {"train": {"batch_size": 16, "grad_accum": 1, "max_steps": total_steps},
              "optimizer": {"lr": 2e-3}, "evaluation": {"every": eval_every},
              "policies": {"abort_drop": 1.5, "abort_patience": 2},
              "demo": {"kernel": "fast", "window": 256, "dim": 64, "depth": 2},
              "task": {"name": task, "preset": "demo"}}
    out: list[ev.Event] = [ev.RunStarted(
        name=name, task=task, preset="demo", config=config, params=1_234_567, device="cpu",
        device_name="CPU (2 cores)", budget={"budget": budget, "capacity": capacity}, total_steps=total_steps,
        pid=4242, t=t0, capabilities=DEMO_CAPABILITIES)]
    score_best = -math.inf
    batch = 16
    for step in range(1, steps + 1):
        t = t0 + step * step_seconds
        if step == steps // 2:
            out.append(ev.SettingChanged(name="batch_size", old=batch, new=32, reason="user", step=step, t=t))
            batch = 32
        loss = 2.0 * math.exp(-step / 120) + 0.15 + 0.05 * float(rng.standard_normal())
        lr = 2e-3 * min(1.0, step / 20)
        out.append(ev.StepLogged(step=step, epoch=step // 100, loss=loss, lr=lr,
                                 grad_norm=0.5 + 1.5 * math.exp(-step / 60) + 0.1 * math.sin(step / 3),
                                 samples_per_s=batch / step_seconds, steps_per_s=1 / step_seconds,
                                 batch_size=batch, components={"recon": 0.7 * loss, "align": 0.3 * loss}, t=t))
        if step % 10 == 0:
            alloc = int((1.1 + 0.8 * (batch / 32)) * (1 << 30) + (step % 30) * (4 << 20))
            out.append(ev.MemorySampled(step=step, allocated=alloc, reserved=alloc + (300 << 20),
                                        peak=alloc + (120 << 20), nvml_used=alloc + (700 << 20), capacity=capacity,
                                        predicted=int(alloc * 1.08), budget=budget, ratio=1 / 1.08,
                                        breakdown={"params": 5 << 20, "adam": 10 << 20, "activations": alloc // 2,
                                                   "transient": alloc // 4}, source="scripted", t=t))
            out.append(ev.SystemSampled(cpu_percent=87.5, ram_used=6 << 30, ram_total=16 << 30, t=t))
        if step % eval_every == 0:
            score = 18.0 + 8.0 * (1 - math.exp(-step / 150)) + 0.3 * float(rng.standard_normal())
            is_best = score > score_best
            score_best = max(score_best, score)
            out.append(ev.EvalDone(step=step, val_loss=loss * 1.1, best=score_best, is_best=is_best, seconds=1.5,
                                   metrics={"val_loss": loss * 1.1, "score": score, "recall_at_1": 0.1 + step / 3000},
                                   primary="score", t=t))
            out.append(ev.CheckpointSaved(step=step, path=f"runs/{name}/checkpoints/last.safetensors", kind="last",
                                          seconds=0.31, bytes=14_800_000, t=t))
        if step == 7:
            out.append(ev.LogLine(text="tokenizer: 1873 words in vocabulary", t=t))
        if step == 120:
            out.append(ev.Warning(text="step 120: non-finite loss, step skipped", step=step, t=t))
    if finished:
        t = t0 + (steps + 1) * step_seconds
        out += [ev.StateChanged(state="finished", reason="max_steps reached", step=steps, t=t),
                ev.RunFinished(status="finished", steps=steps, checkpoint=f"runs/{name}/checkpoints/last.safetensors",
                               t=t)]
    return out


#: The settings a demo search starts from: an LM-like task's runtime settings (long names, five of them), the
#: case where a table that spelled every candidate out whole had no room left for its numbers.
DEMO_AUTOTUNE_START = {"activation_checkpointing": False, "kernel_backend": "fused", "kernel_block": 256, "threads": 0,
                       "data_workers": -1}


def demo_autotune(step: int, t: float, *, measured: int = 6, finished: bool = False) -> list[ev.Event]:
    """A deterministic autotune search from ``step`` at time ``t``: its start, ``measured`` candidates (the start
    first, rates in tokens/s in the tens of thousands) and, when ``finished``, its choice."""
    space = {"kernel_block": [128, 256, 512], "threads": [0, 1], "data_workers": [-1, 0, 2]}
    out: list[ev.Event] = [ev.AutotuneStarted(step=step, reason="user", start=dict(DEMO_AUTOTUNE_START), space=space,
                                              candidates=18, refused=2, budget=8 << 30, unit="tokens/s", t=t)]
    combos = [(256, 0, -1), (128, 0, -1), (512, 0, -1), (256, 1, -1), (256, 0, 0), (256, 0, 2), (512, 1, 2)]
    best_rate = 0.0
    chosen = None
    for i, (chunk, threads, workers) in enumerate(combos[:measured]):
        settings = {**DEMO_AUTOTUNE_START, "kernel_block": chunk, "threads": threads, "data_workers": workers}
        rate = 18_610.0 * (1 + 0.07 * i * (-1) ** i + 0.02 * threads + (0.05 if workers == 2 else 0.0))
        best = rate > best_rate * 1.02
        why = ("the first measured" if i == 0 else "faster beyond the noise") if best else ""
        if best:
            best_rate, chosen = rate, settings
        peak = (3 << 30) + chunk * (6 << 20)
        out.append(ev.AutotuneCandidate(step=step + 8 * (i + 1), settings=settings, predicted=int(peak * 1.04),
                                        measured=peak, rate=rate, steps_per_s=rate / 4096, noise=0.012 + 0.003 * i,
                                        steps=6, warmup=2, best=best, why=why, t=t + 4.0 * (i + 1)))
    if finished:
        start_rate = out[1].rate if measured else None
        out.append(ev.AutotuneChose(step=step + 8 * (measured + 1), status="chosen", settings=chosen or {},
                                    rate=best_rate or None, start_rate=start_rate, seconds=4.0 * measured + 1.5,
                                    t=t + 4.0 * measured + 1.5))
    return out
