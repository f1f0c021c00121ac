"""The page section of bench.long_runs: its tables and goal lines, from the results of bench.long_runs.steps."""

from __future__ import annotations

import statistics

from bench.common import LoadSampler, Section, fmt_stats, verdict

#: Issue 38's goals.
FRAME_S, NAMES_FRAME_S, RSS_MIB, RECORD_B, DIR_B_100M, KEY_MS = 1.5, 2.0, 300.0, 64.0, 8e9, 100.0
GROWTH_MIB, LAG_S, RATE, FAST = 16.0, 1.0, 1000.0, 0.95


def _bytes(count: float) -> str:
    """Decimal units, as disks are sold: 6.2 GB, 340 MB, 12 kB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def _cell(values: list[float], spec: str = ".2f") -> str:
    return fmt_stats(values, spec) if values else "–"


def _missed(name: str, why: str, goal: str) -> str:
    return f"{name}: {why} — goal {goal} MISSED"


def _no_frame(entry: dict, timeout_s: float) -> str:
    """Why an open has no first frame: the viewer killed at the cap, or nothing within the timeout."""
    if entry.get("capped_at") is not None:
        return f"no frame: viewer killed past the RSS cap after {entry['capped_at']:.0f} s"
    return f"no full frame within {timeout_s:.0f} s"


def _load(load: LoadSampler, phase: str) -> str:
    return _cell(load.values(phase), ".1f")


def _rss(entry: dict) -> str:
    steady = entry.get("steady_mib")
    capped = f" (killed past the cap at {entry['capped_at']:.0f} s)" if entry.get("capped_at") is not None else ""
    return f"{steady:.0f} / {entry['peak_mib']:.0f}{capped}" if steady is not None else \
        f"– / {entry['peak_mib']:.0f}{capped}"


def finished_rows(results: dict, load: LoadSampler, plan) -> tuple[list[str], list[str]]:
    """The finished runs' table and goal lines."""
    rows = ["| steps | written in | step record / events.jsonl | in page cache after the opens | first full frame "
            "(wall) | viewer CPU to it | RSS steady / peak, MiB | load |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    largest = max(results["sizes"], default=None)
    for steps, entry in results["sizes"].items():
        opens = entry["finished"]["opens"]
        firsts = [o["first_s"] for o in opens if o["first_s"] is not None]
        cpus = [o["cpu_s"] for o in opens if o["first_s"] is not None and o["cpu_s"] is not None]
        total = entry["dir_b"]  # (block-rounded, as the cache holds pages)
        cache = "–" if entry["cached_b"] is None else f"{_bytes(entry['cached_b'])} of {_bytes(total)}" + \
            (" (**not all**)" if entry["cached_b"] < 0.9 * total else "")
        first = f"{_cell(firsts)} s" if firsts else _no_frame(opens[-1], plan.timeout_s)
        rows.append(f"| {steps:,} | {entry['write_s']:.0f} s | {_bytes(entry['record_b'])} / "
                    f"{_bytes(entry['events_b'])} | {cache} | {first} | {_cell(cpus)} s | "
                    f"{_rss(opens[-1])} | {_load(load, f'size {steps}')} |")
        name = f"long runs: first full frame, {steps:,} steps (wall, fresh process)"
        if steps == largest:
            verdicts.append(verdict(name, statistics.median(firsts), FRAME_S, False, " s") if firsts else
                            _missed(name, _no_frame(opens[-1], plan.timeout_s), f"≤ {FRAME_S:g} s"))
        if steps >= 10_000_000 or steps == largest:
            peak = max(o["peak_mib"] for o in opens)
            verdicts.append(verdict(f"long runs: viewer peak RSS, finished run of {steps:,} steps", peak, RSS_MIB,
                                    False, " MiB"))
    return rows, verdicts


def zoom_rows(results: dict, load: LoadSampler) -> tuple[list[str], list[str]]:
    """The zoom-and-pan table (keys in the app, and the record reads of a frame) and its goal line."""
    rows = ["| steps | keys | frame after a key, ms | record reads of a frame (3 series × 110 columns), ms | load "
            "(the size's phase) |", "|---:|---|---:|---:|---:|"]
    verdicts = []
    largest = max(results["sizes"], default=None)
    for steps, entry in results["sizes"].items():
        keys = entry["finished"]["keys"]
        times = [t * 1e3 for _, t in keys if t is not None]
        names = " ".join(key for key, _ in keys) or "–"
        silent = len(keys) - len(times)
        answered = _cell(times, ".0f") + (f" ({silent} keys: no frame)" if silent else "")
        rows.append(f"| {steps:,} | {names} | {answered} | {_cell([t * 1e3 for t in entry['reads']], '.1f')} | "
                    f"{_load(load, f'size {steps}')} |")
        if steps == largest and times:
            how = "" if results["zoom"] else " (h only: this viewer has no zoom or pan)"
            verdicts.append(verdict(f"long runs: zoom and pan frame, {steps:,} steps, median of {len(times)} keys"
                                    f"{how}", statistics.median(times), KEY_MS, False, " ms"))
    return rows, verdicts


def live_rows(results: dict, load: LoadSampler) -> tuple[list[str], list[str]]:
    """The live runs' table (a writer appending beside the viewer) and their goal lines."""
    rows = ["| steps at the start | writer, steps/s | RSS steady / peak, MiB | lag behind the record, s: median / max "
            "(samples) | load (the size's phase) |", "|---:|---:|---:|---:|---:|"]
    verdicts = []
    largest = max(results["sizes"], default=None)
    for steps, entry in results["sizes"].items():
        live = entry["live"]
        steady = statistics.median(live["rss"]) if live["rss"] else None
        rows.append(f"| {steps:,} | {live['rate'] or 0:,.0f} | {_rss({**live, 'steady_mib': steady})} | "
                    f"{_lags(live)} | {_load(load, f'size {steps}')} |")
        if steps >= 10_000_000 or steps == largest:
            verdicts.append(verdict(f"long runs: viewer peak RSS, live run of {steps:,} steps", live["peak_mib"],
                                    RSS_MIB, False, " MiB"))
    return rows, verdicts


def _lags(live: dict) -> str:
    lags = live["lags"]
    return f"{statistics.median(lags):.2f} / {max(lags):.2f} ({len(lags)})" if lags else "– (no step shown)"


def disk_rows(results: dict) -> tuple[list[str], list[str]]:
    """Bytes on disk a step: the record, and the whole run directory (no checkpoint files), with their goals."""
    rows = ["| steps | step record, B/step | events.jsonl, B/step | run directory | the same at 100M steps |",
            "|---:|---:|---:|---:|---:|"]
    verdicts = []
    largest = max(results["sizes"], default=None)
    for steps, entry in results["sizes"].items():
        scaled = entry["dir_b"] / steps * 100_000_000
        rows.append(f"| {steps:,} | {entry['record_b'] / steps:.1f} | {entry['events_b'] / steps:.1f} | "
                    f"{_bytes(entry['dir_b'])} | {_bytes(scaled)} |")
        if steps == largest:
            verdicts.append(verdict(f"long runs: step record bytes a step ({steps:,} steps, default metrics)",
                                    entry["record_b"] / steps, RECORD_B, False, " B"))
            how = "" if steps == 100_000_000 else f", scaled from {steps:,} steps"
            verdicts.append(verdict(f"long runs: run directory of 100M steps, checkpoints aside{how}", scaled / 1e9,
                                    DIR_B_100M / 1e9, False, " GB"))
    return rows, verdicts


def old_lines(results: dict, load: LoadSampler, plan) -> tuple[list[str], list[str]]:
    """The old run's conversion, in a fresh process and in the viewer."""
    if "old" not in results:
        return ["- **An old run**: not measured in this run."], []
    old = results["old"]
    steps = old.get("steps", plan.old)
    direct, viewer = old["direct"], old["viewer"]
    lines = [f"- **An old run** ({steps:,} steps in the JSON-lines form of schema 2, events.jsonl "
             f"{_bytes(old['log_b'])}; load {_load(load, 'old')}):"]
    if "error" in direct:
        lines.append(f"  - `engine.run.steps.convert` in a fresh process failed: {direct['error']}")
    else:
        lines.append(f"  - `engine.run.steps.convert` in a fresh process: {direct['wall_s']:.1f} s wall, "
                     f"{direct['cpu_s']:.1f} s CPU, peak RSS {direct['peak_mib']:.0f} MiB, {direct['calls']} progress "
                     "calls")
    first = "–" if viewer["first_s"] is None else f"{viewer['first_s']:.1f} s"
    full = "–" if viewer["full_s"] is None else f"{viewer['full_s']:.1f} s"
    if viewer["converts"]:
        done = "not within the timeout" if viewer["converted_s"] is None else f"{viewer['converted_s']:.1f} s"
        how = (f"first frame (partial) {first}, the run's last step on screen {full}, the record complete {done}; "
               f"the status line showed the conversion on {viewer['bar_screens']} screens")
    else:
        how = (f"first frame {first}, the run's last step on screen {full} (this viewer reads the log: "
               "nothing is converted, no bar)")
    lines.append(f"  - `attach` on it: {how}; RSS steady / peak {_rss(viewer)} MiB")
    verdicts = [verdict("long runs: the old run's conversion shows a progress bar in the viewer (screens)",
                        viewer["bar_screens"], 1)]
    if "error" not in direct:
        verdicts.append(f"long runs: one-time conversion of the old {steps:,}-step log (fresh process): "
                        f"{direct['wall_s']:.1f} s wall, {direct['cpu_s']:.1f} s CPU (reported, no goal)")
    return lines, verdicts


def names_rows(results: dict, load: LoadSampler, plan) -> tuple[list[str], list[str]]:
    """The many-names runs' table and goal lines."""
    rows = ["| metric names | events.jsonl | run directory | first full frame (wall) | RSS steady / peak, MiB | load |",
            "|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for names, entry in results["names"].items():
        opens = entry["open"]["opens"]
        firsts = [o["first_s"] for o in opens if o["first_s"] is not None]
        first = f"{_cell(firsts)} s" if firsts else _no_frame(opens[-1], plan.timeout_s)
        rows.append(f"| {names:,} | {_bytes(entry['log_b'])} | {_bytes(entry['dir_b'])} | {first} | "
                    f"{_rss(opens[-1])} | {_load(load, f'names {names}')} |")
        name = f"long runs: first full frame, {names:,} metric names (wall)"
        verdicts.append(verdict(name, statistics.median(firsts), NAMES_FRAME_S, False, " s") if firsts else
                        _missed(name, _no_frame(opens[-1], plan.timeout_s), f"≤ {NAMES_FRAME_S:g} s"))
        verdicts.append(verdict(f"long runs: viewer peak RSS, {names:,} metric names",
                                max(o["peak_mib"] for o in opens), RSS_MIB, False, " MiB"))
    return rows, verdicts


def soak_growth(soak: dict) -> tuple[float, float, float] | None:
    """(RSS at 10-20 % of the soak, RSS over its last 10 %, growth) in MiB: the first tenth is the viewer
    settling (its first frames, the caches it fills once), not growth with the run."""
    if soak["first_s"] is None:
        return None
    samples = [(at, mib) for at, mib in soak["samples"] if at >= soak["first_s"]]
    if len(samples) < 10:
        return None
    start, end = samples[0][0], samples[-1][0]
    span = end - start
    early = [mib for at, mib in samples if start + 0.1 * span <= at <= start + 0.2 * span]
    late = [mib for at, mib in samples if at >= end - 0.1 * span]
    if not early or not late:
        return None
    return statistics.median(early), statistics.median(late), statistics.median(late) - statistics.median(early)


def soak_lines(results: dict, load: LoadSampler, plan) -> tuple[list[str], list[str]]:
    """The live soak: growth, lag, the writer's rate."""
    if "soak" not in results:
        return ["- **Live soak**: not measured in this run."], []
    soak = results["soak"]
    asked, rate = soak.get("asked", plan.soak), soak.get("asked_rate", plan.rate)
    growth = soak_growth(soak)
    lags = soak["lags"]
    rss = "no frame" if growth is None else \
        f"RSS {growth[0]:.0f} MiB at 10–20 % → {growth[1]:.0f} MiB over the last 10 % (growth {growth[2]:+.1f})"
    lag = "no step shown" if not lags else \
        (f"lag median {statistics.median(lags):.2f} s, 99th percentile {sorted(lags)[int(0.99 * (len(lags) - 1))]:.2f}"
         f" s, max {max(lags):.2f} s over {len(lags)} samples")
    lines = [f"- **Live soak**: {soak['followed']:,} steps followed from the viewer's first frame on a new run "
             f"(asked {asked:,}), the writer at {soak['rate'] or 0:,.0f} "
             f"steps/s (asked {rate:,.0f}); {rss}, peak {soak['peak_mib']:.0f} MiB; {lag}; load "
             f"{_load(load, 'soak')}."]
    verdicts = [verdict("long runs: live soak, writer steps/s", soak["rate"] or 0.0, RATE),
                verdict("long runs: live soak, steps the dashboard followed", soak["followed"], asked)]
    if growth is None:
        verdicts.append(_missed("long runs: live soak, viewer RSS growth", "no frame", f"≤ {GROWTH_MIB:g} MiB"))
    else:
        verdicts.append(verdict(f"long runs: live soak of {asked:,} steps, viewer RSS growth", growth[2],
                                GROWTH_MIB, False, " MiB"))
    if lags:
        verdicts.append(verdict("long runs: live soak, the dashboard's lag behind the writer (max)", max(lags),
                                LAG_S, False, " s"))
    return lines, verdicts


def fast_lines(results: dict, load: LoadSampler) -> tuple[list[str], list[str]]:
    fast = results.get("fast")
    if fast is None:
        return ["- **Fast steps**: not measured in this run; the fast-steps section (bench.engine_overhead_fast) "
                "has the row, measured on the engine that writes the step record."], []
    return ([f"- **Fast steps** (bench.engine_overhead_fast's toy rows, {fast['rounds']} interleaved rounds of "
             f"{fast['steps']:,} steps; the engine writes the step record on its drainer thread): bare loop "
             f"{fmt_stats(fast['bare'], '.0f')} steps/s, engine ÷ bare **{fmt_stats(fast['ratios'])}**; load "
             f"{_load(load, 'fast')}."],
            [verdict("long runs: fast steps, engine ÷ bare loop steps/s (with the step record)",
                     statistics.median(fast["ratios"]), FAST)])


def viewer_note(results: dict) -> str:
    if results["reads_record"]:
        return "The viewer in this tree reads the step record."
    return ("**The viewer in this tree reads every step from events.jsonl** (the viewer before issue 38): on the "
            "runs written by this version it draws the log's step lines (one a second of the run's clock), not "
            "the record, so its rows for them are not its cost on a long run; its rows for the old run and the "
            "many names are.")


def _spaced(blocks: list[str]) -> list[str]:
    """Table rows and list items as they are; a blank line around any other line and between a table and a list
    (markdown would read a list item right under a table as its row)."""
    out: list[str] = []
    for line in blocks:
        if not line.startswith(("|", "- ", "  -")):
            line = f"\n{line}\n"
        elif line.startswith("- ") and out and out[-1].startswith("|"):
            line = f"\n{line}"
        out.append(line)
    return out


def build(results: dict, plan, load: LoadSampler, command: str) -> Section:
    """The section: tables and lines, and every goal line (a part not measured says so; a table with no rows is
    left out)."""
    sized = bool(results["sizes"])
    finished, zoom = finished_rows(results, load, plan), zoom_rows(results, load)
    live, disk = live_rows(results, load), disk_rows(results)
    parts = [old_lines(results, load, plan), names_rows(results, load, plan), soak_lines(results, load, plan),
             fast_lines(results, load)]
    intro = (f"Runs written as this version writes them (the step record, events.jsonl with an engine's other "
             f"events and a step line a second), opened by `sensorlm-tui attach` in a 120×40 tmux pane; "
             f"{plan.repeat} fresh opens each after {'an unmeasured one' if plan.warm else 'none'}; RSS capped at "
             f"{plan.rss_cap_mib:,.0f} MiB. \"In page cache\": how much of the run's files the cache held after the "
             "opens (util-linux fincore; a viewer reading the record reads a small part of them, and a run larger "
             f"than the cache is partly read from disk). {viewer_note(results)} Through the section: "
             f"{load.summary()}.")
    blocks = [intro]
    if sized:
        live_run = next(iter(results["sizes"].values()))["live"]  # (the part's plan, which may not be this run's)
        rate, seconds = live_run.get("asked_rate", plan.rate), live_run.get("seconds") or plan.live_s
        blocks += ["**Finished runs**", *finished[0], "**Zoom and pan to random windows**", *zoom[0],
                   f"**Live runs** (a writer appending at {rate:,.0f} steps/s through the engine's sinks for "
                   f"{seconds:.0f} s)", *live[0], "**On disk**", *disk[0]]
    else:
        blocks.append("- **Runs of 1M to 100M steps**: not measured in this run.")
    blocks += parts[0][0]
    blocks += ["**Many metric names** (a plain loop, 40 steps)", *parts[1][0]] if results["names"] else \
        ["- **Many metric names**: not measured in this run."]
    blocks += [*parts[2][0], *parts[3][0]]
    body = "\n".join(_spaced(blocks)).strip()
    verdicts = [v for _, lines in (finished, zoom, live, disk, *parts) for v in lines]
    return Section("Long runs: 1M to 100M steps, many names, a live soak", command, body, verdicts)
