"""Deprecated path of the task protocol: plugins import ``Task`` and ``TaskError`` from ``sensorlm_tui.plugin``.

The protocol itself is engine.tasks.protocol; this name keeps plugins written against it working for one
release, with a DeprecationWarning (engine.core.moved).
"""

from engine.core.moved import moved

#: The names that moved (their new home is in the warning).
MOVED = ["Task", "TaskError"]
__getattr__ = moved(__name__, "sensorlm_tui.plugin", dict.fromkeys(MOVED, "engine.tasks.protocol"))
