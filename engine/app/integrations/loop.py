"""Deprecated path of the plain-loop integration: import it from ``sensorlm_tui.loop``.

It lives in engine.app.integrations.plain_loop; this name keeps scripts written against it working for one
release, with a DeprecationWarning (engine.core.moved).
"""

from engine.core.moved import moved

#: The names that moved (their new home is in the warning).
MOVED = ["cockpit", "Run", "StopRun"]
__getattr__ = moved(__name__, "sensorlm_tui.loop", dict.fromkeys(MOVED, "engine.app.integrations.plain_loop"))
