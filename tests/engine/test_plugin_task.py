"""A task from outside the tree, through its entry point only: examples/plugin_task, installed into a temp dir.

It trains headless, checkpoints, resumes, plans (traced: it has no analytic model), lists, and the
dashboard shows its metric by name. A broken plugin is one line naming its entry point (exit 2),
and the built-in tasks keep working beside it. CI's venv stays clean: --target and PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_events, run_forked


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plugin installed into a target directory, built from a copy (an in-tree build would leave build/ and
    *.egg-info in examples/plugin_task, whose stale copies of the code then turn up in every grep)."""
    work = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(ROOT / "examples" / "plugin_task", work / "plugin_task",
                             ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(work / "site"), str(source)], check=True, capture_output=True, text=True,
                   timeout=300)
    return work / "site"


def _cli(forks, site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``sensorlm-tui args…`` with ``site`` first on its path (PYTHONPATH's place), forked from the session's
    preloaded server: the plugin is found through its entry point when the command asks for tasks, not at start."""
    return run_forked(forks, *args, timeout=timeout, path=[str(site)])


@pytest.mark.slow
def test_plugin_trains_resumes_plans_lists_and_shows_its_metric(forks, site: Path, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "ones"
    first = _cli(forks, site, "train", "--task", "ones", "--threads", "1", "--max-steps", "6", "--eval-every", "3",
                 "--checkpoint-every", "3", "--run-dir", str(run), "--headless")
    assert first.returncode == 0, first.stderr
    evals = [e for e in read_events(run) if e["type"] == "eval"]
    assert evals and all(e["primary"] == "mae" and "mae" in e["metrics"] for e in evals)
    started = next(e for e in read_events(run) if e["type"] == "run_started")
    assert started["capabilities"]["primary"]["higher_is_better"] is False and "[ones]" not in started["config"]
    assert started["config"]["ones"]["bits"] == 16
    assert (run / "checkpoints" / "last.safetensors").is_file()

    resumed = _cli(forks, site, "train", "--resume", str(run), "--max-steps", "8", "--headless")
    assert resumed.returncode == 0, resumed.stderr
    new = read_events(run)
    assert [e["step"] for e in new if e["type"] == "step"][-2:] == [7, 8]

    planned = _cli(forks, site, "plan", "--task", "ones", "--trace", "--device", "cpu", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["estimate"]["source"] == "trace" and plan["traced"]["total"] > 0

    listed = _cli(forks, site, "runs", str(tmp_path / "runs"), "--json")
    assert listed.returncode == 0, listed.stderr
    (record,) = json.loads(listed.stdout)
    assert record["name"] == "ones" and record["best_metric"].startswith("mae")

    # The viewer needs no plugin: RunStarted carries the capabilities.
    from engine.run.control.client import RunClient
    from tests.tui.attach.conftest import screen_text, until
    from tui.dashboard.attach_app import AttachApp

    async def scenario() -> None:
        app = AttachApp(lambda: RunClient(run, read_only=True), run, read_only=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model.step == 8, what="the plugin run's history")
            await until(pilot, lambda: "mean abs error" in screen_text(app), what="its metric by name")
            assert app.model.primary.name == "mae" and not app.model.primary.higher_is_better
            await pilot.press("q")

    asyncio.run(scenario())


@pytest.mark.slow
def test_broken_plugin_is_one_line_and_builtins_still_work(forks, tmp_path: Path) -> None:
    site = tmp_path / "broken-site"
    info = site / "broken_plugin-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[sensorlm_tui.tasks]\nbroken = no_such_module_here:SPEC\n")
    bad = _cli(forks, site, "train", "--task", "broken", "--run-dir", str(tmp_path / "b"), "--headless")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "entry point broken = no_such_module_here:SPEC" in lines[0], bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "b").exists()
    unknown = _cli(forks, site, "train", "--task", "nope", "--run-dir", str(tmp_path / "n"), "--headless")
    assert unknown.returncode == 2 and "unknown task; allowed:" in unknown.stderr
    allowed = unknown.stderr.split("allowed:")[1]
    assert "broken" in allowed and "toy" in allowed and "sensorlm" in allowed
    good = _cli(forks, site, "train", "--task", "toy", "--threads", "1", "--max-steps", "2", "--run-dir",
                str(tmp_path / "t"), "--headless")
    assert good.returncode == 0, good.stderr
    presets = _cli(forks, site, "presets", "--task", "toy")
    assert presets.returncode == 0 and "demo" in presets.stdout


def test_plugin_model_compiles_and_matches_eager(site: Path, monkeypatch) -> None:
    """The plugin's whole model under torch.compile (it declares no blocks), in this process through its entry
    point; ``aot_eager``: the wiring, not inductor's kernels (tests/engine/test_compile.py runs those)."""
    monkeypatch.syspath_prepend(str(site))
    from engine.core import config as cfg
    from tests.engine.compile_check import assert_close, compare

    config = cfg.load(task="ones", overrides={"train": {"max_steps": 3, "batch_size": 4}, "evaluation": {"every": 0},
                                              "checkpoint": {"every_steps": 0}})
    eager, compiled = compare(config, "model", "aot_eager")
    assert_close(eager.losses, compiled.losses, rel=1e-6)
    assert compiled.trainer.task.compile_units(compiled.trainer.model) == []
    first = compiled.of("compile")[0]
    assert (first.step, first.mode, first.frames) == (1, "model", 1)
