"""A loop of your own in the cockpit: ``with cockpit("runs/mine", model=model, optimizer=opt) as run:``, then
``run.step(loss=loss)`` last in each step.

docs/INTEGRATIONS.md. torch is imported when a run opens, not with this module.
"""

from engine.app.integrations.core import CockpitError
from engine.app.integrations.plain_loop import Run, StopRun, cockpit

__all__ = ["cockpit", "Run", "StopRun", "CockpitError"]
