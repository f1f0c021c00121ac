"""Deprecated path of the plugin API's config-section base: plugins import ``Section`` from ``sensorlm_tui.plugin``.

It is defined in engine.core.sections beside the core's own sections; this name keeps plugins written
against it working for one release, with a DeprecationWarning (engine.core.moved).
"""

from engine.core.moved import moved

#: The names that moved (their new home is in the warning).
MOVED = ["MAX_SEED", "MAX_VAL_SAMPLES", "Section"]
__getattr__ = moved(__name__, "sensorlm_tui.plugin", dict.fromkeys(MOVED, "engine.core.sections"))
