"""SensorLM: a CoCa-style sensor-language model trained on synthetic or CSV wearable days.

Modules, one idea each: ``spec`` (its config section, presets and capabilities; torch-free),
``data`` (synthetic days), ``captions`` (true captions at three levels), ``csv_data`` (the CSV
format), ``tokenizer``, ``model``, ``losses``, ``task`` (the Task the Trainer drives),
``memory`` and ``blocks`` (its analytic memory model; torch-free) and ``presets_info``
(parameter counts of the presets).

The package itself imports nothing heavy, so reading ``spec`` costs no torch import;
``SensorLMTask`` is resolved on first use.
"""


def __getattr__(name: str):
    if name == "SensorLMTask":
        from engine.tasks.sensorlm.task import SensorLMTask

        return SensorLMTask
    raise AttributeError(name)


__all__ = ["SensorLMTask"]
