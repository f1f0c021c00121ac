"""What autotune may vary in a run: the dimensions, drawn from the run's live table (engine.core.live_table).

Every entry whose ``autotune`` names how its values are drawn is a dimension,
engine and task settings alike:

- ``micro_batches`` (``grad_accum``, the effective batch ``train.batch_size``
  kept): powers of two of micro-batches per rank, so every size from the
  whole per-rank batch down to one sample, largest (highest predicted peak)
  first. Only where the task declares that accumulation keeps its loss
  (``Capabilities.exact_accumulation``); a task whose loss couples a batch's
  samples (a contrastive loss) keeps its micro-batch unless ``grad_accum`` is
  named in ``autotune.settings``.
- ``choices`` (the task's declared settings, and any entry with values to
  try): a choice's choices in their declared fastest-first order, an
  integer's listed ``choices`` within its bounds, each under its ``requires``.
  A setting that changes what is trained on (``Setting.keeps_math`` False: a
  sequence length) is searched only when named.
- ``cores`` and ``workers`` (``runtime.threads``, ``runtime.data_workers``):
  powers of two up to the usable cores, and the engine's own plan (-1), one
  builder thread (0), or 1 … min(cores, 4) worker processes.

They are searched in that order: the step's shape (the micro-batch), the
task's settings, then how the step is fed. ``autotune.settings`` narrows the
space to the names it lists, and a ``name=a|b`` entry that dimension to those
values. Every value is checked against the setting's declared bounds
(``Setting.check``) before it enters the space. Torch-free.
"""

from __future__ import annotations

from typing import Any, Callable

from engine.core.live_table import LiveTable
from engine.core.taskspec import Setting
from engine.training.autotune_search import Dimension

#: Most data worker processes tried (each one is a process with the task built: ~250 MiB and 1-3 s to start).
MAX_WORKERS = 4
#: Search order by who takes a change: the step's shape, then the task's settings, then the rest.
_ORDER = {"step": 0, "task": 1}


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


def task_dimension(setting: Setting) -> Dimension | None:
    """The values to try of a setting with declared choices (None when it has none: a free integer)."""
    values = tuple(v for v in setting.choices if setting.check(v) is None)
    if not values:
        return None
    return Dimension(setting.name, values, tuple(tuple(pair) for pair in setting.requires),
                     ordered=setting.kind != "choice")


def dimension(setting: Setting, per_rank: int, cores: int, current: dict[str, Any]) -> Dimension | None:
    """The values autotune tries of ``setting``, drawn as its entry's ``autotune`` says (None: nothing to try)."""
    now = current.get(setting.name)
    if setting.autotune == "micro_batches":
        return Dimension(setting.name, micro_batches(per_rank, now), ordered=True) if per_rank > 1 else None
    if setting.autotune == "cores":
        if cores <= 1:
            return None
        counts = {c for c in (2 ** i for i in range(cores.bit_length())) if c <= cores} | {cores - 1, cores}
        if isinstance(now, int) and now > 0:
            counts.add(now)
        return Dimension(setting.name, tuple(sorted(counts)), ordered=True)
    if setting.autotune == "workers":
        return Dimension(setting.name, (-1, 0, *range(1, min(cores, MAX_WORKERS) + 1)))
    dim = task_dimension(setting) if setting.autotune == "choices" else None
    if dim is not None and now not in dim.values:  # the value in force is always among them
        dim = Dimension(dim.name, (now, *dim.values), dim.requires, dim.ordered)
    return dim


def dimensions(table: LiveTable, named: list[str], per_rank: int, cores: int,
               current: dict[str, Any]) -> tuple[list[Dimension], str]:
    """The space's dimensions in search order, and a note naming what was left out and why (module docstring).

    ``table`` is the run's live table; ``named`` the names ``autotune.settings`` lists (empty: the default
    space); ``current`` the settings in force (a value in force is always among a dimension's values).
    """
    only = {entry.partition("=")[0]: entry.partition("=")[2].split("|") for entry in named if "=" in entry}
    wanted = {entry.partition("=")[0] for entry in named}
    dims: list[Dimension] = []
    left_out: list[str] = []
    tried = [s for s in table.entries if s.autotune]
    for setting in sorted(tried, key=lambda s: _ORDER.get(s.applies, len(_ORDER))):
        if wanted and setting.name not in wanted:
            continue
        if not wanted and not table.keeps_math(setting):
            if setting.autotune != "micro_batches" or per_rank > 1:  # one sample a rank: no other micro-batch
                left_out.append(setting.name)
            continue
        dim = dimension(setting, per_rank, cores, current)
        if dim is None:
            continue
        dims.append(narrowed(dim, only[dim.name], current.get(dim.name)) if dim.name in only else dim)
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


def count_refused(dims: list[Dimension], start: dict, fits: Callable[[dict], bool],
                  moves_memory: Callable[[str], bool] = lambda name: True) -> tuple[int, int]:
    """(combinations predicted to fit, combinations predicted not to), over the dimensions that move memory only
    (``moves_memory``: the run's table says; threads move no predicted byte, so each memory combination is
    predicted once)."""
    memory = [d for d in dims if moves_memory(d.name)]
    runtime = 1
    for dim in dims:
        if not moves_memory(dim.name):
            runtime *= len(dim.values)
    fit = refused = 0
    for combo in grid(memory, start):
        if fits(combo):
            fit += 1
        else:
            refused += 1
    return fit * runtime, refused * runtime
