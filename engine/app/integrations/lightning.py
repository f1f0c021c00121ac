"""Deprecated path of the Lightning callback: import it from ``sensorlm_tui.lightning``.

It lives in engine.app.integrations.lightning_callback; this name keeps scripts written against it working
for one release, with a DeprecationWarning (engine.core.moved). Lightning is imported when the name is read.
"""

from engine.core.moved import moved

#: The names that moved (their new home is in the warning).
MOVED = ["CockpitCallback"]
__getattr__ = moved(__name__, "sensorlm_tui.lightning",
                    dict.fromkeys(MOVED, "engine.app.integrations.lightning_callback"))
