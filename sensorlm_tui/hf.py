"""The cockpit in a ``transformers.Trainer`` run: ``Trainer(..., callbacks=[CockpitCallback("runs/mine")])``.

docs/INTEGRATIONS.md. Importing this module imports transformers.
"""

from engine.app.integrations.hf_callback import CockpitCallback

__all__ = ["CockpitCallback"]
