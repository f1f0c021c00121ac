"""The GPU script's compile and sync-free rows: probe kinds for bench.gpu_probe, rows for bench.gpu, lines for
bench.gpu_section. Each probe runs in a fresh CUDA process, as every GPU row does.

* ``compiled``: one configuration trained eager and then compiled (``runtime.compile``, the memory guard off:
  it refuses compile on a device, engine.budget.guard), each for ``steps`` steps: steps/s after the
  compiling step, compile seconds and recompiles (CompileDone events), and each run's
  ``max_memory_allocated`` beside the eager prediction the budget judged it by (the compiled memory row:
  the budget's contract is never under, at most +10 %);
* ``readback``: the same configuration with ``runtime.step_readback`` sync and deferred, interleaved twice:
  steps/s, GPU idle % (NVML utilisation at 10 Hz while it trains) and host syncs a step, counted by
  ``torch.cuda.set_sync_debug_mode("warn")``, which warns at each CUDA call that waits for the stream
  (``item``, ``tolist``, a blocking copy to the host); the deferred readback's wait on the previous step's
  copy event is not one, by design (the device has the next step queued behind it).
"""

from __future__ import annotations

import time
import warnings

from bench.common import GpuBusy

#: (label, task, preset, overrides, compile mode) of the compiled rows.
COMPILED = [
    ("toy b32 model", "toy", "demo", {"train": {"batch_size": 32}}, "model"),
    ("sensorlm demo b16 blocks", "sensorlm", "demo", {"train": {"batch_size": 16}}, "blocks"),
    ("lm demo b8 seq512 lora blocks", "lm", "demo", {"train": {"batch_size": 8}, "lm": {"seq_len": 512,
                                                                                          "finetune": "lora"}},
     "blocks"),
]
#: The readback row's configuration: small and fast, where a host sync a step costs the most.
READBACK = ("toy b32", "toy", "demo", {"train": {"batch_size": 32}})


def _config(task: str, preset: str, overrides: dict, step_readback: str = "auto", **train):
    """The row's config on CUDA, no evaluation or checkpoint in the way (as bench.gpu_probe's rows)."""
    from engine.core import config as cfg

    base = {"train": train, "evaluation": {"every": 0}, "runtime": {"device": "cuda", "step_readback": step_readback},
            "checkpoint": {"every_steps": 0}}
    return cfg.load(task=task, preset=preset, overrides=cfg.deep_merge(base, overrides))


def _run(config, on_step=None) -> tuple[object, list]:
    from engine.run.control.requests import Controls
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    events: list = []

    def sink(event) -> None:
        events.append(event)
        if on_step is not None and event.type == "step":
            on_step(event.step)

    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.run()
    return trainer, events


def _rate(events: list, lo: int) -> float:
    steps = [(e.step, e.t) for e in events if e.type == "step"]
    later = [(s, t) for s, t in steps if s >= lo]
    if len(later) < 2:
        return float("nan")
    (s0, t0), (s1, t1) = later[0], later[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 else float("nan")


def compiled(task: str, preset: str, overrides: dict, mode: str, steps: int = 60) -> dict:
    """Eager then compiled (module docstring): rates, compile seconds, peaks against the eager prediction."""
    import torch

    out: dict = {"mode": mode}
    for name, compile_mode in (("eager", "off"), ("compiled", mode)):
        config = _config(task, preset, {**overrides, "budget": {"check": False}}, max_steps=steps,
                         compile=compile_mode)
        torch.cuda.reset_peak_memory_stats()
        trainer, events = _run(config)
        started = next(e for e in events if e.type == "run_started")
        compiles = [e for e in events if e.type == "compile"]
        out[f"{name}_steps_per_s"] = _rate(events, max(3, steps // 4))
        out[f"{name}_peak"] = torch.cuda.max_memory_allocated()
        out["predicted"] = started.budget.predicted
        if compiles:
            out["compile_s"] = sum(e.seconds for e in compiles)
            out["recompiles"] = sum(e.recompiles for e in compiles)
        del trainer
        torch.cuda.empty_cache()
    out["ratio"] = out["compiled_steps_per_s"] / out["eager_steps_per_s"]
    return out


def readback(task: str, preset: str, overrides: dict, steps: int = 300, rounds: int = 2) -> dict:
    """Sync against deferred readback, interleaved ``rounds`` times (module docstring)."""
    out: dict = {"sync": [], "deferred": []}
    for index in range(rounds):
        for mode in (("sync", "deferred") if index % 2 == 0 else ("deferred", "sync")):
            config = _config(task, preset, overrides, max_steps=steps, step_readback=mode)
            out[mode].append(_one_readback(config, steps))
    return out


def _one_readback(config, steps: int) -> dict:
    """One run: steps/s, GPU idle % and host syncs a step over steps [steps/4, 3·steps/4]."""
    import torch

    lo, hi = steps // 4, 3 * steps // 4
    busy = GpuBusy()
    marks: dict = {}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def on_step(step: int) -> None:  # the step events of a deferred run arrive one step late: same window
            if step == lo:
                marks["lo"] = (time.perf_counter(), len(caught))
                torch.cuda.set_sync_debug_mode("warn")
                busy.start()
            elif step == hi:
                torch.cuda.set_sync_debug_mode("default")
                marks["hi"] = (time.perf_counter(), len(caught))
                busy.stop()

        _run(config, on_step)
    busy.stop()
    (t0, w0), (t1, w1) = marks["lo"], marks["hi"]
    syncs = [w for w in caught[w0:w1] if "synchroniz" in str(w.message)]
    return {"steps_per_s": (hi - lo) / (t1 - t0), "syncs_per_step": len(syncs) / (hi - lo),
            "gpu_idle_pct": busy.idle_pct}


KINDS = {"compiled": compiled, "readback": readback}


def rows(row_type) -> list:
    """bench.gpu's rows of the ``compile`` group (``row_type``: its Row class), the sync-free step first (the
    cheapest and the one no other row measures), then the compiled rows, cheapest first."""
    label, task, preset, overrides = READBACK
    out = [row_type("compile", f"readback sync vs deferred, {label}", "readback",
                    {"task": task, "preset": preset, "overrides": overrides}, limit=90, least=30)]
    out += [row_type("compile", label, "compiled", {"task": task, "preset": preset, "overrides": overrides,
                                                    "mode": mode}, limit=180, least=60)
            for label, task, preset, overrides, mode in COMPILED]
    return out


def lines(rows: list[dict], verdicts: list[str]) -> list[str]:
    """The page's lines for the ``compile`` group's rows (bench.gpu_section)."""
    from bench.common import fmt_stats, ratios, stats, verdict

    mib = 1 << 20
    out = ["| compiled row | eager steps/s | compiled steps/s | compiled ÷ eager | compile s | recompiles | eager "
           "peak MiB | compiled peak MiB | predicted MiB (eager's) | predicted ÷ compiled peak |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("label", "").startswith("readback"):
            continue
        if "error" in r:
            out.append(f"| {r['label']} | error: {r['error']} | | | | | | | | |")
            continue
        over = r["predicted"] / r["compiled_peak"] if r.get("predicted") and r.get("compiled_peak") else None
        out.append(f"| {r['label']} | {r['eager_steps_per_s']:.1f} | {r['compiled_steps_per_s']:.1f} | "
                   f"**{r['ratio']:.3f}** | {r.get('compile_s', 0):.1f} | {r.get('recompiles', 0)} | "
                   f"{r['eager_peak'] / mib:,.0f} | {r['compiled_peak'] / mib:,.0f} | "
                   f"{(r['predicted'] or 0) / mib:,.0f} | {over if over is None else f'{over:.3f}'} |")
        if over is not None:
            verdicts.append(verdict(f"GPU compiled memory, {r['label']}: predicted ÷ measured peak (never under)",
                                    over, 1.0) + f"; at most 1.10: {'met' if over <= 1.10 else 'MISSED'}")
    for r in rows:
        if not r.get("label", "").startswith("readback") or "error" in r:
            continue
        sync = [x["steps_per_s"] for x in r["sync"]]
        deferred = [x["steps_per_s"] for x in r["deferred"]]
        idle = {k: [x["gpu_idle_pct"] for x in r[k] if x["gpu_idle_pct"] is not None] for k in ("sync", "deferred")}
        syncs = {k: stats([x["syncs_per_step"] for x in r[k]])[1] for k in ("sync", "deferred")}
        out += ["", f"{r['label']}: steps/s sync {fmt_stats(sync, '.0f')}, deferred {fmt_stats(deferred, '.0f')} "
                f"(deferred ÷ sync **{fmt_stats(ratios(deferred, sync))}**); GPU idle % sync "
                f"{fmt_stats(idle['sync'], '.1f') if idle['sync'] else '—'}, deferred "
                f"{fmt_stats(idle['deferred'], '.1f') if idle['deferred'] else '—'}; host syncs a step "
                f"(torch.cuda.set_sync_debug_mode) sync {syncs['sync']:.2f}, deferred {syncs['deferred']:.2f}."]
        verdicts.append(verdict("GPU: host syncs a step with the deferred readback", syncs["deferred"], 0.0,
                                higher_is_better=False))
    return out
