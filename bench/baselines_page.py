"""The fair baselines' page section (bench.baselines measures; this says what was measured, and nothing more).

Every ratio is printed with its rounds, their min–max and the load average
sampled through those rounds; a missed goal's reason is assembled from this
run's own measurements (the rounds' spread, the load, the engine's plan line,
how long the loops waited for their batches, what a batch and a step cost in
the inline loop), never from a remembered explanation.
"""

from __future__ import annotations

import math

from bench.baseline_variants import (
    BATCH,
    CAREFUL,
    DATALOADER,
    DATALOADER_2,
    ENGINE,
    ENGINE_T2,
    INLINE,
    LIGHTNING,
    PRESET,
    VARIANTS,
)
from bench.common import Section, fmt_stats, ratios, stats, verdict
from bench.cpu_share import AUTOGROUP

#: Goals (performance issue): engine ÷ the faster careful variant of each pair, quiet.
GOALS = {"DataLoader loop": 1.0, "Lightning": 1.05}
#: Share of its window a loop spent waiting for batches from which its rate is said to be the data's pace.
DATA_BOUND_SHARE = 0.2
#: A window whose first third's steps cost more than this × the CPU of its last third's was still in start-up.
SETTLED_BELOW = 1.2
#: What the kernel's autogroup setting means for a neighbour's load (the CPU table's preamble).
AUTOGROUP_MEANS = {
    "on": "CFS shares the CPU between sessions, not threads, and every variant and the load generator start a "
          "session of their own, so beside one busy neighbour a variant is sure of only half the box whatever its "
          "thread plan (the neighbour's session gets the other half while it can use it): on 2 cores, one that keeps "
          "both busy quietly can keep ~0.5 of its quiet rate at best",
    "off": "CFS shares the CPU between threads, so a variant with more busy threads than the neighbour takes more "
           "of it",
    "unknown": "whether CFS shares the CPU between sessions or between threads is not known here",
}


def section(results: dict, steps: int, window: tuple[int, int], quick: bool) -> Section:
    """The page section from measured (or, in the tests, given) results."""
    shown = [name for name in VARIANTS if results.get(name, {}).get("quiet")]  # the variants that ran
    lines = [_preamble(results, steps, window), "", *_table(results, shown, steps), "", _settling_line(results, shown),
             "", *_headline(results), "",
             _loss_line(results, shown, steps), *_data_lines(results)]
    if results[ENGINE]["load"]:
        lines += ["", *_loaded_lines(results)]
    if any(_finite(results[name]["cores"]["load"]) for name in shown):
        lines += ["", *_cpu_lines(results, shown)]
    if results.get("_capped"):
        lines += ["", "Runs killed at the time cap (measured over the steps they reached): "
                  + "; ".join(results["_capped"]) + "."]
    if results["_plans"]:
        lines += ["", "The engine's thread plans (its log line):", ""] + [f"- {p}" for p in sorted(set(
            results["_plans"]))]
    verdicts = [_goal_line(results, pair) for pair in CAREFUL]
    if results[ENGINE]["load"]:
        verdicts += _loaded_verdicts(results)
    return Section("Fair baselines: engine vs a careful DataLoader loop and Lightning",
                   f"python -m bench --only baselines{' --quick' if quick else ''}", "\n".join(lines), verdicts)


def _preamble(results: dict, steps: int, window: tuple[int, int]) -> str:
    rounds = results.get("_rounds", {})
    quiet, extra, loaded = (rounds.get(key, "?") for key in ("rounds", "extra", "load"))
    tried = ", ".join(f"{n}: {r:.2f} steps/s" for n, r in sorted(results["_tried"].items())) or "not tried"
    return (f"SensorLM `{PRESET}` preset, batch {BATCH}, {steps} steps a run, each variant a process of its own; "
            f"steps/s between the ends of steps {window[0]} and {window[1]} from each variant's own per-step wall "
            f"times (the engine's step events, the loops' marks), the same steps for all. {quiet} interleaved rounds "
            f"quiet (the extras in the first {extra}), then {loaded} beside a CPU-bound neighbour. The loops run at "
            f"{results['_threads']} torch thread(s), the fastest for the DataLoader loop here (tried: {tried}); the "
            f"engine plans its own. Load average through the run (1-minute figure, sampled every second; the bench's "
            f"own variant is part of it): quiet blocks {_load(results, 'quiet')}; loaded blocks "
            f"{_load(results, 'load')}.")


def _table(results: dict, shown: list[str], steps: int) -> list[str]:
    engine = results[ENGINE]["quiet"]
    lines = ["| variant | steps/s quiet | engine ÷ this | cores used | steps per CPU-second | loss at step "
             f"{steps} | launch → exit s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in shown:
        rows = results[name]["rows"]["quiet"]
        lines.append(f"| {name} | {fmt_stats(results[name]['quiet'], '.2f')} | "
                     f"{'1' if name == ENGINE else '**' + _cell(ratios(engine, results[name]['quiet'])) + '**'} | "
                     f"{_cell(results[name]['cores']['quiet'], '.2f')} | "
                     f"{_cell(results[name]['steps_per_cpu_s']['quiet'], '.2f')} | "
                     f"{_cell([r['loss'] for r in rows], '.4f')} | {_cell([r['wall_s'] for r in rows], '.1f')} |")
    return lines


def _settling_line(results: dict, shown: list[str]) -> str:
    """Whether each variant's window was past its start-up: the CPU a step of its first third ÷ of its last."""
    worst = {name: max(_finite([r.get("settling", math.nan) for r in results[name]["rows"]["quiet"]]), default=None)
             for name in shown}
    cells = ", ".join(f"{name} {value:.2f}" for name, value in worst.items() if value is not None)
    unsettled = ", ".join(name for name, value in worst.items() if value is not None and value > SETTLED_BELOW)
    line = (f"Window past start-up (the process tree's CPU a step over the window's first third ÷ over its last "
            f"third, the worst quiet run of each variant): {cells or 'not read'}.")
    if unsettled:
        line += (f" **Not settled** (above {SETTLED_BELOW:g}): {unsettled}: their window's first steps cost more "
                 "CPU than its last (a start-up inside it).")
    return line


def _headline(results: dict) -> list[str]:
    """Each engine ÷ careful-variant ratio with its rounds, min–max and the load through them."""
    lines = ["Engine ÷ each careful variant, quiet, round by round (steps/s; then steps per CPU-second, which a "
             "neighbour's load moves less):", ""]
    for pair in CAREFUL.values():
        for name in pair:
            if results[name]["quiet"]:
                per_cpu = ratios(results[ENGINE]["steps_per_cpu_s"]["quiet"], results[name]["steps_per_cpu_s"]["quiet"])
                lines.append(f"- engine ÷ {name}: {_ratio_text(results, name, 'quiet')}; per CPU-second "
                             f"{_cell(per_cpu)}")
    return lines


def _ratio_text(results: dict, name: str, condition: str) -> str:
    """'**1.110 (1.050–1.150)** over 5 rounds (1.100, …); load average 1.6 (1.1–2.2) through them'."""
    values = ratios(results[ENGINE][condition], results[name][condition])
    finite = _finite(values)
    if not finite:
        return "not measured"
    each = ", ".join(f"{v:.3f}" for v in values)
    return (f"**{fmt_stats(finite)}** over {len(values)} round(s) ({each}); load average "
            f"{_load(results, condition, len(values))} through them")


def _load(results: dict, condition: str, rounds: int | None = None) -> str:
    """'1.6 (1.1–2.2)': the 1-minute load average sampled through ``condition``'s blocks (the first ``rounds``)."""
    blocks = results.get("_load", {}).get(condition, [])[:rounds]
    values = [v for block in blocks for v in block]
    return fmt_stats(values, ".1f") if values else "not sampled"


def faster(results: dict, pair: str) -> str:
    """The faster careful variant of ``pair`` (median quiet steps/s): the one the engine is judged against."""
    return max((n for n in CAREFUL[pair] if _finite(results[n]["quiet"])),
               key=lambda n: _median(results[n]["quiet"]), default=CAREFUL[pair][0])


def _goal_line(results: dict, pair: str) -> str:
    name = faster(results, pair)
    values = _finite(ratios(results[ENGINE]["quiet"], results[name]["quiet"]))
    label = f"engine default ÷ {pair} steps/s (quiet)"
    if not values:
        return f"{label}: not measured"
    low, mid, high = stats(values)
    rounds = f"{len(values)} round{'s' * (len(values) != 1)}"
    line = (f"{verdict(label, mid, GOALS[pair])}; against the faster careful {pair} here, {name}; {rounds}, "
            f"{low:.3f}–{high:.3f}; load average {_load(results, 'quiet', len(values))} through them")
    return f"{line} — why (this run's measurements): {_miss_reason(results, name, values)}" if "MISSED" in line \
        else line


def _miss_reason(results: dict, name: str, values: list[float]) -> str:
    """What this run measured around a missed headline goal: the spread, the plan, the data waits, the costs."""
    low, _, high = stats(values)
    parts = [f"the engine was behind in {sum(v < 1 for v in values)} of {len(values)} rounds"
             + (f" and ahead in the others (the rounds straddle 1: {low:.3f}–{high:.3f})" if high > 1 else "")]
    plans = sorted({p.split(": ", 1)[1].split(" — ")[0] for p in results["_plans"]
                    if p.startswith(f"quiet, {ENGINE}: ")})
    if plans:
        parts.append("its plan: " + " | ".join(plans))
    share = _median([r["data_share"] for r in results[name]["rows"]["quiet"]])
    if math.isfinite(share):
        parts.append(f"the {name} waited {share:.0%} of its window for batches"
                     + (" (its rate is its workers' pace)" if share >= DATA_BOUND_SHARE else
                        f" (under {DATA_BOUND_SHARE:.0%}: not the data that set its rate)"))
    return "; ".join(parts)


def _loss_line(results: dict, shown: list[str], steps: int) -> str:
    """Whether every variant and round reached the same loss at the last step (the same training, run apart)."""
    losses = {name: _finite(results["_loss"].get(name, [])) for name in shown}
    every = [v for values in losses.values() for v in values]
    if not every:
        return f"Loss at step {steps}: not read."
    low, high = min(every), max(every)
    if high - low <= 1e-4 * max(abs(high), 1.0):
        return f"Loss at step {steps}: {low:.4f} for every variant and round: the same training in each."
    apart = "; ".join(f"{name} {_cell(values, '.4f')}" for name, values in losses.items() if values)
    return f"Loss at step {steps} **differs** between variants ({apart}): they did not train alike."


def _data_lines(results: dict) -> list[str]:
    """The data path as measured: what a batch and a step cost (inline loop), how long each loop waited."""
    inline = results[INLINE]["rows"]["quiet"]
    out = []
    if inline:
        build, compute = (_median([r[key] for r in inline]) for key in ("build_ms", "compute_ms"))
        out.append(f"Measured here (the inline loop, median step of its window): a batch builds in {build:.0f} ms "
                   f"and a step computes in {compute:.0f} ms on {results['_threads']} torch thread(s).")
    waits = [f"{name} {_median([r['data_share'] for r in results[name]['rows']['quiet']]):.0%}"
             for name in (DATALOADER, DATALOADER_2) if results[name]["rows"]["quiet"]]
    if waits:
        out.append("Share of the window a loop waited for its next batch: " + ", ".join(waits) + ".")
    return [""] + [" ".join(out)] if out else []


def _loaded_lines(results: dict) -> list[str]:
    lines = ["| variant | steps/s with a CPU-bound neighbour | loaded ÷ quiet (round by round) |", "|---|---:|---:|"]
    for name in VARIANTS:
        load = results[name]["load"]
        if load:
            lines.append(f"| {name} | {fmt_stats(load, '.2f')} | {_cell(ratios(load, results[name]['quiet']))} |")
    return lines + ["", f"Beside the neighbour: engine ÷ {DATALOADER} {_ratio_text(results, DATALOADER, 'load')}; "
                        f"engine ÷ {LIGHTNING} {_ratio_text(results, LIGHTNING, 'load')}."]


def _loaded_verdicts(results: dict) -> list[str]:
    load = f"load average {_load(results, 'load')} through the loaded blocks"
    kept = stats(ratios(results[ENGINE]["load"], results[ENGINE]["quiet"]))[1]
    line = verdict("engine default: loaded ÷ quiet steps/s", kept, 0.9)
    out = [f"{line}; {load}" + (f" — why: {_share_reason(results)}" if "MISSED" in line else "")]
    if results[ENGINE_T2]["load"]:
        out.append(f"engine --threads 2: loaded ÷ quiet steps/s: "
                   f"{stats(ratios(results[ENGINE_T2]['load'], results[ENGINE_T2]['quiet']))[1]:.3g} (the fixed "
                   "setting, for contrast)")
    efficiency = _median(_kept(results, ENGINE, "steps_per_cpu_s"))
    if math.isfinite(efficiency):
        line = verdict("engine default: steps per CPU-second, loaded ÷ quiet", efficiency, 0.9)
        out.append(line + (" — why: each CPU-second under load bought fewer steps than quiet: CPU went to threads "
                           "that waited or spun for cores the neighbour held" if "MISSED" in line else ""))
        if results[ENGINE_T2]["load"]:
            out.append(f"engine --threads 2: steps per CPU-second, loaded ÷ quiet: "
                       f"{_median(_kept(results, ENGINE_T2, 'steps_per_cpu_s')):.3g} (the fixed setting, for "
                       "contrast)")
    return out


def _cpu_lines(results: dict, shown: list[str]) -> list[str]:
    """The CPU table: cores each variant's processes used, the share load left them, steps per CPU-second kept."""
    group = results.get("_autogroup", "unknown")
    cores = results.get("_cores")
    lines = [f"Where loaded ÷ quiet goes: steps/s = cores used × steps per CPU-second (CPU time of the variant's "
             f"process tree in the window, read from outside alike for every variant), so loaded ÷ quiet steps/s = "
             f"the CPU share load left it × the steps per CPU-second it kept. The share is the kernel's decision and "
             f"bounds loaded ÷ quiet for any plan that wastes no CPU quietly; the plan's part is the second factor, "
             f"≈ 1 when it wastes no CPU. Autogroup is **{group}** here (`{AUTOGROUP}`)"
             f"{f' on {cores} usable cores' if cores else ''}: {AUTOGROUP_MEANS[group]}.", "",
             "| variant | cores used quiet / loaded | CPU share loaded ÷ quiet (the bound) | steps per CPU-second "
             "quiet | steps per CPU-second loaded ÷ quiet |", "|---|---:|---:|---:|---:|"]
    for name in shown:
        cpu, per_cpu = results[name]["cores"], results[name]["steps_per_cpu_s"]
        if not results[name]["load"] or not _finite(cpu["quiet"]):
            continue
        lines.append(f"| {name} | {_cell(cpu['quiet'], '.2f')} / {_cell(cpu['load'], '.2f')} | "
                     f"{_cell(_kept(results, name, 'cores'))} | {_cell(per_cpu['quiet'], '.2f')} | "
                     f"{_cell(_kept(results, name, 'steps_per_cpu_s'))} |")
    return lines


def _share_reason(results: dict) -> str:
    """Why the engine default kept less than 0.9 of its quiet steps/s under load, from its measured CPU."""
    cpu = results[ENGINE]["cores"]
    share = _median(_kept(results, ENGINE, "cores"))
    efficiency = _median(_kept(results, ENGINE, "steps_per_cpu_s"))
    if not math.isfinite(share):
        return "its CPU use was not measured, so the kernel's share cannot be told from the plan's waste"
    if share >= 0.9:
        return (f"not the kernel's share (its processes kept {share:.2f} of their quiet CPU): each CPU-second bought "
                f"{efficiency:.2f} of its quiet steps")
    return (f"the kernel's share: beside the neighbour the engine's processes got {share:.2f} of the CPU they used "
            f"quiet ({_median(cpu['quiet']):.2f} → {_median(cpu['load']):.2f} cores; autogroup "
            f"{results.get('_autogroup', 'unknown')}), which bounds loaded ÷ quiet steps/s for any plan that wastes "
            f"no CPU quietly; per CPU-second it kept {efficiency:.2f} of its quiet steps")


def _kept(results: dict, name: str, key: str) -> list[float]:
    """Round-by-round loaded ÷ quiet of a variant's ``key`` ("cores", "steps_per_cpu_s"), rounds without a reading
    left out."""
    series = results[name][key]
    return [a / b for a, b in zip(series["load"], series["quiet"]) if math.isfinite(a) and math.isfinite(b) and b]


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _median(values: list[float]) -> float:
    finite = _finite(values)
    return stats(finite)[1] if finite else float("nan")


def _cell(values: list[float], spec: str = ".3f") -> str:
    finite = _finite(values)
    return fmt_stats(finite, spec) if finite else "—"
