"""Other people's training code in the cockpit: a Lightning callback, a transformers callback, a plain loop.

Users import them from the public package (docs/INTEGRATIONS.md):

    from sensorlm_tui.loop import cockpit                   # a loop of your own
    from sensorlm_tui.lightning import CockpitCallback      # Lightning
    from sensorlm_tui.hf import CockpitCallback             # transformers.Trainer

Here they live under internal names (plain_loop, lightning_callback,
hf_callback), each writing the run-directory contract (engine.run) through one
shared core (``core.Cockpit``) and never touching the engine's Trainer, so
``runs``, ``plot`` and ``attach`` work on these runs unchanged. Lightning and
transformers are imported only by their own modules.

The names this package and its ``lightning``, ``hf`` and ``loop`` modules
exported before the public package existed still work for one release, with a
DeprecationWarning (engine.core.moved).
"""

from engine.core.moved import moved

__getattr__ = moved(__name__, "sensorlm_tui.loop", {"cockpit": "engine.app.integrations.plain_loop",
                                                    "Run": "engine.app.integrations.plain_loop",
                                                    "StopRun": "engine.app.integrations.plain_loop",
                                                    "CockpitError": "engine.app.integrations.core"})
