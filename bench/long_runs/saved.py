"""The section measured in parts: `python -m bench.long_runs --parts sizes,old --results FILE`, then `--parts soak`
with the same FILE, each in its own process (a window of time each), and the page gets the section of them all.

FILE (JSON) keeps each run's results, its load samples and its command. A later run that measures a part again
supersedes the earlier run's part (its results, and its load marks, which then count for no phase), so a part
can be re-run alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import LoadSampler

#: The section's parts, in the order they are measured.
PARTS = ("sizes", "old", "names", "soak", "fast")


def part_of(phase: str) -> str | None:
    """The part a load mark belongs to ("size 1000000" → sizes, "names 1000" → names, "end" → None)."""
    head = phase.split(" ", 1)[0]
    return {"size": "sizes", "names": "names"}.get(head, head if head in PARTS else None)


def _keyed(results: dict) -> dict:
    """JSON made the sizes' and the names' keys strings: back to counts."""
    for key in ("sizes", "names"):
        if key in results:
            results[key] = {int(k): v for k, v in results[key].items()}
    return results


def _superseded(run: dict, parts: set[str]) -> dict:
    """``run`` without ``parts`` (measured again since): their results dropped, their load marks unnamed."""
    kept = [part for part in run["parts"] if part not in parts]
    marks = [(name if part_of(name) not in parts else "", at) for name, at in run["load"]["marks"]]
    return {**run, "parts": kept, "load": {**run["load"], "marks": marks}}


def combined(runs: list[dict]) -> dict:
    """The results of every part, from the run that measured it last."""
    out: dict = {"sizes": {}, "names": {}}
    for run in runs:
        results = _keyed(dict(run["results"]))
        out["reads_record"], out["zoom"] = results["reads_record"], results["zoom"]
        for part in run["parts"]:
            if part in ("sizes", "names"):
                out[part].update(results[part])
            elif part in results:
                out[part] = results[part]
    return out


def record(path: Path, parts: tuple[str, ...], results: dict, load: LoadSampler,
           command: str) -> tuple[dict, LoadSampler, list[str]]:
    """Add this run to ``path`` (superseding the parts it measured again); (every part's results, the load
    through all the runs, their commands)."""
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    runs = [_superseded(run, set(parts)) for run in runs]
    runs = [run for run in runs if run["parts"]]
    runs.append({"parts": list(parts), "results": results, "load": load.state(), "command": command})
    path.write_text(json.dumps({"runs": runs}))
    return combined(runs), LoadSampler.joined([run["load"] for run in runs]), [run["command"] for run in runs]
