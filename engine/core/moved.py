"""Names that moved to the public package: the old import keeps working for one release and says where to go.

A user's script or a plugin written against ``engine.app.integrations`` or
``engine.tasks.base`` must not break on upgrade, yet must learn the new path
(``sensorlm_tui.*``). Each old module becomes a shim whose module-level
``__getattr__`` (PEP 562) is made here: reading a moved name imports it from
its internal home and emits one ``DeprecationWarning`` naming the new import.
The warning is raised at the reader's line (``stacklevel=2``: a ``from old
import Name`` reads the attribute in the importing frame), so Python's default
filter shows it to a script run as ``__main__`` and pytest shows it in a
plugin's tests. Built-in code imports the internal homes and never sees it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable


def moved(old: str, new: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of the shim module ``old``: each name of ``homes`` comes from the internal module it
    maps to, with a DeprecationWarning saying ``from {new} import {name}``; any other name is an AttributeError,
    as usual (``from package import submodule`` relies on it)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old}.{name} is deprecated and goes in the next release: use `from {new} import {name}`",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return __getattr__
