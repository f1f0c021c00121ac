"""The run's exports: the task's artefact (a PEFT adapter, a ``save_pretrained`` directory) when a run
finishes and when a viewer asks for a checkpoint now.

Only a task whose spec declares exports (``Capabilities.exports``) is asked;
its ``export`` hook writes the task's default kind into
``RUN/exports/step-N`` (the directory ``sensorlm-tui export RUN`` would
write too), atomically: the task writes a temporary sibling and renames it
into place, so a kill mid-write leaves the previous export or none. An
``ExportWritten`` event names the path; a finished run's ``RunFinished.export``
(its last log line) names the final one.

A failed export is a warning, never a failed run: the checkpoint beside it
holds everything the export is made from, and ``sensorlm-tui export RUN``
retries from it. Processes without a run directory (the other ranks of a
distributed run) export nothing, nor does an FSDP2 run, whose weights are
sharded: `sensorlm-tui export RUN` gathers them from its DCP checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from engine.core.invocation import command
from engine.run import events as ev


class Exporter:
    """Asks the task for its export at the end of a run and on request (module docstring)."""

    def __init__(self, task, kinds: tuple[str, ...], checkpoint_dir: Path | None,
                 emit: Callable[[ev.Event], None]) -> None:
        """``kinds``: the spec's declared exports (none: nothing to do); exports go beside ``checkpoint_dir``."""
        self.task, self.emit = task, emit
        self.directory = Path(checkpoint_dir).parent / "exports" if checkpoint_dir and kinds else None

    @staticmethod
    def kinds(task_name: str, strategy: str) -> tuple[str, ...]:
        """What a run of ``task_name`` exports as it trains: the spec's declared kinds; none under FSDP2
        (``runtime.strategy``), whose weights are sharded: `sensorlm-tui export RUN` gathers them."""
        from engine.core.registry import get_spec

        return () if strategy == "fsdp2" else get_spec(task_name).capabilities.exports

    def final(self, model, step: int, status: str) -> str | None:
        """The export of a run that ended with ``status``: written for a finished run only; its path, or None."""
        return self.export(model, step, "final") if status == "finished" else None

    def export(self, model, step: int, why: str) -> str | None:
        """Write the task's export of ``model`` at ``step`` (``why``: final / manual); its path, or None."""
        if self.directory is None:
            return None
        start = time.perf_counter()
        try:
            path = self.task.export(model, self.directory / f"step-{step}", None)
        except Exception as exc:  # noqa: BLE001 - the run goes on; the checkpoint can be exported later
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            self.emit(ev.Warning(text=f"export at step {step} failed ({line}); the checkpoint holds the run: "
                                      f"`{command('export', self.directory.parent)}` writes it", step=step))
            return None
        if path is None:
            return None
        self.emit(ev.ExportWritten(step=step, path=str(path), kind=why, seconds=time.perf_counter() - start))
        return str(path)
