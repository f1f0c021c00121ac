"""Deprecated path of the transformers callback: import it from ``sensorlm_tui.hf``.

It lives in engine.app.integrations.hf_callback; this name keeps scripts written against it working for one
release, with a DeprecationWarning (engine.core.moved). transformers is imported when the name is read.
"""

from engine.core.moved import moved

#: The names that moved (their new home is in the warning).
MOVED = ["CockpitCallback"]
__getattr__ = moved(__name__, "sensorlm_tui.hf", dict.fromkeys(MOVED, "engine.app.integrations.hf_callback"))
