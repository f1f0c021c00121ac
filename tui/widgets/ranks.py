"""The rank table of a distributed run: one row per rank from the latest RanksSampled, the straggler marked.

Drawn inside the system panel (the machine's load and the job's ranks are read
together), only once a distributed engine has sent a RanksSampled event. The
engine names the straggler and its cost (engine.distributed.telemetry), so
every viewer agrees on it; this only lays the numbers out.
"""

from __future__ import annotations

from tui.model.format import human_bytes


def _ms(seconds) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.0f}ms"


def rank_table(event) -> str:
    """Markup lines: a header, one row per rank (step, step/work/data time, its peak memory — the number the
    per-rank prediction is about — else allocated or RSS), the straggler's cost."""
    peaks = any(r.get("peak") for r in event.ranks)
    lines = [f"[b]rank  step  step  work  data  {'peak' if peaks else 'mem'}[/]"]
    for r in sorted(event.ranks, key=lambda r: r.get("rank", 0)):
        memory = next((r.get(k) for k in ("peak", "allocated", "rss") if r.get(k) is not None), None)
        row = (f"{r.get('rank', '?'):>4}  {r.get('step', 0):>4}  {_ms(r.get('step_s')):>4}  {_ms(r.get('work_s')):>4}  "
               f"{_ms(r.get('data_s')):>4}  {human_bytes(memory) if memory is not None else '—'}")
        lines.append(f"[$warning]{row} ◀ slow[/]" if r.get("rank") == event.straggler else row)
    if event.straggler is not None and event.cost_s:
        lines.append(f"[$warning]rank {event.straggler} costs the job {_ms(event.cost_s)} a step "
                     f"(others' median work {_ms(event.median_work_s)})[/]")
    return "\n".join(lines)
