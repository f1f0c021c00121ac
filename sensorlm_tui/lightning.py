"""The cockpit in a Lightning run: ``Trainer(callbacks=[CockpitCallback("runs/mine")])``.

docs/INTEGRATIONS.md. Importing this module imports Lightning (``lightning.pytorch``, else ``pytorch_lightning``).
"""

from engine.app.integrations.lightning_callback import CockpitCallback

__all__ = ["CockpitCallback"]
