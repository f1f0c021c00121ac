"""Other people's training code in the cockpit: a Lightning callback, a transformers callback, a plain loop.

    from engine.app.integrations import cockpit                       # a loop of your own
    from engine.app.integrations.lightning import CockpitCallback     # Lightning
    from engine.app.integrations.hf import CockpitCallback            # transformers.Trainer

Each writes the run-directory contract (engine.run) through one shared core
(``core.Cockpit``) and never touches the engine's Trainer, so ``runs``,
``plot`` and ``attach`` work on these runs unchanged. Lightning and
transformers are imported only by their own modules. docs/INTEGRATIONS.md.
"""

from engine.app.integrations.core import CockpitError
from engine.app.integrations.loop import Run, StopRun, cockpit

__all__ = ["cockpit", "Run", "StopRun", "CockpitError"]
