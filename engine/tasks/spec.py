"""Deprecated path of the spec vocabulary: plugins import it from ``sensorlm_tui.plugin``.

The vocabulary is defined in engine.core.taskspec (so the config and the registry read a spec without
importing any task); this name keeps plugins written against it working for one release, with a
DeprecationWarning (engine.core.moved).
"""

from engine.core.moved import moved

#: The names that moved (their new home is in the warning).
MOVED = ["Capabilities", "Metric", "Setting", "TaskSpec"]
__getattr__ = moved(__name__, "sensorlm_tui.plugin", dict.fromkeys(MOVED, "engine.core.taskspec"))
