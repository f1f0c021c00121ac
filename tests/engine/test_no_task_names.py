"""The core and the viewer know no task by name: a scan of engine/ and tui/ sources proves it.

Outside the SensorLM package, the task registry (which lists the built-ins by
name) and engine/core/migrate.py (old formats must be named to be migrated), no .py
file may name SensorLM, attention backends (``attn_backend``, ``attn_chunk``,
``sdpa``, ``chunked``) or PSNR; the product's own name (``sensorlm-tui``,
``sensorlm_tui``, ``SENSORLM_TUI``) is allowed. Other task packages
(engine/tasks/<name>/) own their metrics and kernels, so they may name PSNR or
an attention kernel of their own, but never SensorLM.

PENDING lists tui files another change is still replacing; it may only shrink:
a listed file that comes clean fails the test until it is taken off the list.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SENSORLM = re.compile(r"(?i)sensorlm(?![-_]tui)")
BACKENDS_OR_METRIC = re.compile(r"(?i)attn_backend|attn_chunk|\bsdpa\b|\bchunked\b|psnr")
#: Allowed to name everything.
EXEMPT = {"engine/core/registry.py", "engine/core/migrate.py",
          # task-API vocabulary of torch's own attention kernels (which one SDPA runs on a target): naming them
          # is its job, and it names no task
          "engine/tasks/attention_kernels.py"}
EXEMPT_DIRS = ("engine/tasks/sensorlm/",)
#: tui files still being made capability-driven by other changes (the tune modal's one predictor,
#: the scripted demo, the schema-1 fallback now done by engine.core.migrate). Only ever shrinks.
PENDING: set[str] = set()


def _violations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for top in ("engine", "tui"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT or rel.startswith(EXEMPT_DIRS):
                continue
            task_package = rel.startswith("engine/tasks/") and rel.count("/") >= 3
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if SENSORLM.search(line) or (not task_package and BACKENDS_OR_METRIC.search(line)):
                    found.setdefault(rel, []).append(f"{rel}:{number}: {line.strip()[:100]}")
    return found


def test_no_core_or_viewer_file_names_a_task_its_kernels_or_its_metric() -> None:
    found = _violations()
    unexpected = [line for rel, lines in found.items() if rel not in PENDING for line in lines]
    assert not unexpected, "names a task's specifics outside its package:\n" + "\n".join(unexpected)


def test_the_pending_list_only_holds_files_that_still_need_it() -> None:
    clean = sorted(rel for rel in PENDING if rel not in _violations())
    assert not clean, f"these are clean now: take them off PENDING: {clean}"


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    for text in ("x = 'sensorlm'", "attn_backend = 1", "v = psnr(x)", "backend = 'sdpa'"):
        assert SENSORLM.search(text) or BACKENDS_OR_METRIC.search(text), text
    for text in ("sensorlm-tui train", "SENSORLM_TUI_FAULTS", "import sensorlm_tui"):
        assert not SENSORLM.search(text), text
