"""The plugin API's spec vocabulary, defined in engine.core.taskspec so the config and the registry can
read a spec without importing any task."""

from engine.core.taskspec import Capabilities, Metric, Setting, TaskSpec

__all__ = ["Capabilities", "Metric", "Setting", "TaskSpec"]
