"""What autotune may vary in a run: the dimensions, from the task's declared settings and the engine's own.

The space is the run's live settings, not a list kept here:

- **micro-batch** (``grad_accum``, the effective batch ``train.batch_size``
  kept): powers of two of micro-batches per rank, so every size from the
  whole per-rank batch down to one sample, largest (highest predicted peak)
  first. Only where the task declares that accumulation keeps its loss
  (``Capabilities.exact_accumulation``); a task whose loss couples a batch's
  samples (a contrastive loss) keeps its micro-batch unless ``grad_accum`` is
  named in ``autotune.settings``.
- **the task's declared settings** (``Capabilities.settings``) that have values
  to try: a choice's choices in their declared fastest-first order, an
  integer's listed ``choices`` within its bounds, each under its ``requires``.
  A setting that changes what is trained on (``Setting.keeps_math`` False: a
  sequence length) is searched only when named.
- **torch threads** and **data workers** (``runtime.threads``,
  ``runtime.data_workers``): powers of two up to the usable cores, and the engine's own plan
  (-1), one builder thread (0), or 1 … min(cores, 4) worker processes.

``autotune.settings`` narrows the space to the names it lists, and a
``name=a|b`` entry that dimension to those values. Every value is
checked against the setting's declared bounds (``Setting.check``) before it
enters the space. Torch-free.
"""

from __future__ import annotations

from typing import Any, Callable

from engine.training.autotune_search import Dimension

#: The engine's own dimensions besides the micro-batch.
RUNTIME = ("threads", "data_workers")
#: Most data worker processes tried (each one is a process with the task built: ~250 MiB and 1-3 s to start).
MAX_WORKERS = 4


def micro_batches(per_rank: int, current: int) -> tuple[int, ...]:
    """grad_accum values from the whole per-rank batch in one micro-batch to one sample each (powers of two, and
    the current one), in order of micro-batch size, largest first."""
    values = {current} | {g for g in (2 ** i for i in range(per_rank.bit_length())) if g <= per_rank}
    values |= {per_rank}
    by_size: dict[int, int] = {}
    for g in sorted(values):
        by_size.setdefault(-(-per_rank // g), g)  # distinct micro-batch sizes only (the fewest micro-batches)
    if current not in by_size.values():
        by_size[-(-per_rank // current)] = current
    return tuple(by_size[size] for size in sorted(by_size, reverse=True))


def task_dimension(setting) -> Dimension | None:
    """The values to try of a declared setting (None when it has none: a free integer)."""
    values = tuple(v for v in setting.choices if setting.check(v) is None)
    if not values:
        return None
    return Dimension(setting.name, values, tuple(tuple(pair) for pair in setting.requires),
                     ordered=setting.kind != "choice")


def dimensions(caps, named: list[str], per_rank: int, grad_accum: int, cores: int,
               current: dict[str, Any]) -> tuple[list[Dimension], str]:
    """The space's dimensions in search order, and a note naming what was left out and why (module docstring).

    ``caps`` is the task's Capabilities; ``named`` the names ``autotune.settings`` lists (empty: the default
    space); ``current`` the settings in force (a value in force is always among a dimension's values).
    """
    only = {entry.partition("=")[0]: entry.partition("=")[2].split("|") for entry in named if "=" in entry}
    wanted = {entry.partition("=")[0] for entry in named}
    dims: list[Dimension] = []
    left_out: list[str] = []

    def take(name: str, keeps_math: bool) -> bool:
        if wanted:
            return name in wanted
        if not keeps_math:
            left_out.append(name)
        return keeps_math

    if per_rank > 1 and take("grad_accum", caps.exact_accumulation):
        dims.append(Dimension("grad_accum", micro_batches(per_rank, grad_accum), ordered=True))
    for setting in caps.settings:
        dim = task_dimension(setting) if take(setting.name, setting.keeps_math) else None
        if dim is not None:
            if current.get(setting.name) not in dim.values:
                dim = Dimension(dim.name, (current.get(setting.name), *dim.values), dim.requires, dim.ordered)
            dims.append(dim)
    if cores > 1 and take("threads", True):
        counts = {c for c in (2 ** i for i in range(cores.bit_length())) if c <= cores} | {cores - 1, cores}
        if isinstance(current.get("threads"), int) and current["threads"] > 0:
            counts.add(current["threads"])
        dims.append(Dimension("threads", tuple(sorted(counts)), ordered=True))
    if take("data_workers", True):
        dims.append(Dimension("data_workers", (-1, 0, *range(1, min(cores, MAX_WORKERS) + 1))))
    dims = [narrowed(d, only[d.name], current.get(d.name)) if d.name in only else d for d in dims]
    dims = [d for d in dims if d.values]
    note = ""
    if left_out:
        note = (f"not searched (they change the run's math; name them in autotune.settings to search them): "
                f"{', '.join(left_out)}")
    unknown = sorted(wanted - {d.name for d in dims})
    if unknown:
        note = "; ".join(x for x in (note, f"nothing to try for {', '.join(unknown)}") if x)
    return dims, note


def narrowed(dim: Dimension, shown: list[str], current: Any) -> Dimension:
    """``dim`` with only the values written as ``shown`` (``autotune.settings`` entries ``name=a|b``; booleans as
    true/false), and the value in force, which the search starts from."""
    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    keep = tuple(v for v in dim.values if text(v) in shown or v == current)
    return Dimension(dim.name, keep, dim.requires, dim.ordered)


def grid(dims: list[Dimension], start: dict) -> list[dict]:
    """Every combination of the dimensions' values (each dimension only under its requirements)."""
    combos: list[dict] = [dict(start)]
    for dim in dims:
        grown = []
        for combo in combos:
            if dim.applies(combo):
                grown += [{**combo, dim.name: v} for v in dim.values]
            else:
                grown.append(combo)
        combos = grown
    unique = {tuple(sorted((k, repr(v)) for k, v in c.items())): c for c in combos}
    return list(unique.values())


def count_refused(dims: list[Dimension], start: dict, fits: Callable[[dict], bool]) -> tuple[int, int]:
    """(combinations predicted to fit, combinations predicted not to), over the memory-relevant dimensions only
    (threads and workers move no predicted byte, so each memory combination is predicted once)."""
    memory = [d for d in dims if d.name not in RUNTIME]
    runtime = 1
    for dim in dims:
        if dim.name in RUNTIME:
            runtime *= len(dim.values)
    fit = refused = 0
    for combo in grid(memory, start):
        if fits(combo):
            fit += 1
        else:
            refused += 1
    return fit * runtime, refused * runtime

