"""SensorLM: a CoCa-style sensor-language model trained on synthetic or CSV wearable days.

Modules, one idea each: ``data`` (synthetic days), ``captions`` (true captions at three levels),
``csv_data`` (the CSV format), ``tokenizer``, ``model``, ``losses``, ``task`` (the Task the
Trainer drives) and ``presets_info`` (parameter counts of the presets).
"""

from engine.tasks.sensorlm.task import SensorLMTask

__all__ = ["SensorLMTask"]
