"""`sensorlm-tui presets`: exact parameter counts without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_env, run_cli


def _table(task: str) -> dict[str, int]:
    out = run_cli("presets", "--task", task)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("tasks: ") and all(t in lines[0] for t in ("sensorlm (default)", "lm", "gapfill"))
    rows = [line.split() for line in lines[2:] if not line.startswith("(")]
    return {r[0]: int(r[1].replace(",", "")) for r in rows}


@pytest.mark.slow
def test_sensorlm_counts_equal_the_models_built_on_the_meta_device() -> None:
    from engine.tasks.sensorlm.presets_info import param_counts

    assert _table("sensorlm") == param_counts()


def test_toy_count_equals_the_model() -> None:
    torch = pytest.importorskip("torch")
    from engine.core import config as cfg
    from engine.core.registry import make_task

    config = cfg.load(preset="demo", task="toy")
    with torch.device("meta"):
        model = make_task(config).build_model()
    assert _table("toy") == {"demo": sum(p.numel() for p in model.parameters())}


@pytest.mark.slow
def test_gapfill_without_an_analytic_model_counts_its_u_net() -> None:
    torch = pytest.importorskip("torch")
    from engine.core import config as cfg
    from engine.tasks.gapfill import model as gmodel

    expected = {}
    for preset in ("demo", "base"):
        config = cfg.load(preset=preset, task="gapfill")
        with torch.device("meta"):
            net = gmodel.build(2 * config.task_config.samples.neighbours, 6, config.task_config.model)
        expected[preset] = sum(p.numel() for p in net.parameters())
    assert _table("gapfill") == expected


def test_presets_never_imports_torch() -> None:
    code = ("import sys, argparse; from tui.commands.presets import main; "
            "main(argparse.Namespace(task='sensorlm')); print('torch' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                         check=True)
    assert out.stderr.strip() == "False"


def test_unknown_task_is_one_line_and_exit_2() -> None:
    out = run_cli("presets", "--task", "nope")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "allowed: " in out.stderr and "sensorlm" in out.stderr
