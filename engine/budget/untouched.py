"""A user's model left exactly as it was after code ran it: what a trace on fake tensors must guarantee.

``torch.func.functional_call`` swaps fake parameters and buffers in for one
call and puts the real ones back, but a forward can change its module in
other ways, and those stay. Lightning's own basic transformer example builds
``src_mask`` and its positional table on the first forward (``if self.pe is
None: self.pe = ...``); traced, that first forward is on fakes, so the module
kept a FakeTensor, and the next real forward (or ``callback_metrics``'
``.item()``) died with ``DataDependentOutputException``. Caches, counters,
lazily registered buffers and lists a forward appends to do the same.

So the state is taken before and put back after, whatever the code did:

- every submodule's ``__dict__`` (its attributes, ``training``, and the
  dicts that hold its parameters, buffers, submodules and hooks): the same
  objects under the same names, nothing added, nothing removed;
- the contents of every builtin container reachable from those through
  other containers (a dict cache, a nested dict of tables, a list of
  history): emptied and refilled in place, so a container keeps its identity
  and its items. Written through the base methods (``dict.update``, not an
  override: transformers' ``ModelOutput`` refuses ``update``).

Objects of other classes that a forward mutates inside (an attribute of a
custom cache object) are the one thing not restored. Copies hold references
only: no tensor is copied, so the cost is a few dict copies per submodule.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from torch import nn


@contextmanager
def untouched(model: nn.Module) -> Iterator[None]:
    """Run the block, then put every submodule of ``model`` back as it was (module docstring)."""
    modules = [(module, dict(vars(module))) for module in model.modules()]
    containers = _container_contents([value for _, state in modules for value in state.values()])
    try:
        yield
    finally:
        for module, state in modules:
            current = vars(module)
            if not _same(current, state):
                current.clear()
                current.update(state)
        for container, content in containers:
            _refill(container, content)


def _container_contents(roots: list[Any]) -> list[tuple[Any, Any]]:
    """(container, a copy of its contents) for every dict, list and set reachable from ``roots`` through
    containers only (modules and tensors are not walked; each container once)."""
    seen: set[int] = set()
    out = []
    stack = list(roots)
    while stack:
        value = stack.pop()
        if not isinstance(value, (dict, list, set)) or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            items = list(dict.items(value))
            out.append((value, items))
            stack.extend(item for pair in items for item in pair)
        else:
            copy = list(value) if isinstance(value, list) else set(value)
            out.append((value, copy))
            stack.extend(copy)
    return out


def _same(current: dict, saved: dict | list) -> bool:
    """True when dict ``current`` holds exactly the keys and the very objects of ``saved`` (identity, never
    ``==``: a tensor's ``==`` is a tensor)."""
    items = saved.items() if isinstance(saved, dict) else saved
    return len(current) == len(saved) and all(dict.get(current, k, _MISSING) is v for k, v in items)


def _refill(container: Any, content: Any) -> None:
    """Put ``content`` back into ``container`` in place, through the base class's methods."""
    if isinstance(container, dict):
        if not _same(container, content):
            dict.clear(container)
            dict.update(container, content)
    elif isinstance(container, list):
        if len(container) != len(content) or any(a is not b for a, b in zip(container, content)):
            list.__setitem__(container, slice(None), content)
    else:
        set.clear(container)
        set.update(container, content)


#: A value no dict holds (the unchanged-check's default).
_MISSING = object()
