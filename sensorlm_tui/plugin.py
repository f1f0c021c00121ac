"""What a task plugin is written in: the ``Task`` protocol, its spec, and the config section it declares.

A plugin is a package with an entry point in the ``sensorlm_tui.tasks`` group naming a ``TaskSpec``
(examples/plugin_task). The spec and its ``Section`` are torch-free, so listing tasks imports no model code;
the ``Task`` (``TaskSpec.task``, a "module:Class" string) is imported only to train or trace. ``TaskError`` is
the one-line error a task raises on bad input (a data file, a checkpoint of another shape).
"""

from engine.core.sections import MAX_SEED, MAX_VAL_SAMPLES, Section
from engine.core.taskspec import Capabilities, Metric, Setting, TaskSpec
from engine.tasks.protocol import Task, TaskError

__all__ = ["Task", "TaskError", "TaskSpec", "Capabilities", "Metric", "Setting", "Section", "MAX_SEED",
           "MAX_VAL_SAMPLES"]
