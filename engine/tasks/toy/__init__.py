"""The engine's own tiny task (masked-signal reconstruction with an MLP): ``spec`` (torch-free),
``task`` (the Task) and ``memory`` (its analytic memory model, torch-free).

``ToyTask`` is resolved on first use, so reading ``spec`` costs no torch import.
"""


def __getattr__(name: str):
    if name == "ToyTask":
        from engine.tasks.toy.task import ToyTask

        return ToyTask
    raise AttributeError(name)


__all__ = ["ToyTask"]
