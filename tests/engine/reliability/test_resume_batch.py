"""A resume capped by the memory guard runs the batch its warning names (it said "64 → 2" and ran 64)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.engine.reliability.harness import TOY, events_of


def test_resume_cap_warning_matches_the_batch_that_runs(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    toy = ["--task", "toy", "--threads", "1", "--set", "data.val_samples=8"]  # the default toy width: 410k params
    first = engines.spawn([*toy, "--batch-size", "64", "--max-steps", "3", "--eval-every", "0",
                           "--run-dir", str(run)], tmp_path / "a")
    assert first.wait(60) == 0, first.stderr()
    # 7.5 MB: the toy's weights and Adam state fit, a batch of 64 does not (analytic 7.6 MiB at 64 with fused AdamW).
    resumed = engines.spawn(["--resume", str(run), "--vram-gb", "0.0075", "--max-steps", "6"], tmp_path / "b")
    assert resumed.wait(60) == 0, resumed.stderr()
    warned = [e["text"] for e in events_of(run, "warning") if "batch_size 64 →" in e["text"]]
    assert warned, "the guard did not cap the resume: the test proves nothing"
    capped = int(re.search(r"batch_size 64 → (\d+)", warned[-1]).group(1))
    assert capped < 64
    ran = {e["batch_size"] for e in events_of(run, "step") if e["step"] > 3}
    assert ran == {capped}, f"warning said {capped}, steps ran {ran}"


def test_resume_flag_batch_size_wins_over_the_checkpoint(engines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = engines.spawn([*TOY, "--batch-size", "16", "--max-steps", "3", "--eval-every", "0",
                           "--run-dir", str(run)], tmp_path / "a")
    assert first.wait(60) == 0, first.stderr()
    resumed = engines.spawn(["--resume", str(run), "--batch-size", "8", "--max-steps", "6"], tmp_path / "b")
    assert resumed.wait(60) == 0, resumed.stderr()
    assert {e["batch_size"] for e in events_of(run, "step") if e["step"] > 3} == {8}
