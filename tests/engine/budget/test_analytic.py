"""The analytic model: torch-free, parameter counts exact against the real model, monotone, sane ordering."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from engine.budget import analytic
from engine.core import config as cfg
from engine.tasks.sensorlm import memory as slm
from engine.tasks.sensorlm.spec import PRESETS
from tests.conftest import ROOT, cli_env
from tests.engine.budget.conftest import small


def test_budget_planning_modules_do_not_import_torch() -> None:
    code = ("import engine.budget.analytic, engine.budget.plan, engine.budget.guard, engine.app.plan_cli, "
            "engine.budget.trace, engine.budget.settings\n"
            "from engine.core import config\n"
            "c = config.load(preset='base', task='sensorlm', overrides={'budget': {'vram_gb': 80}})\n"
            "from engine.budget import plan\n"
            "plan.make_plan(c, plan.resolve_budget(c, None))\n"
            "import sys; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.mark.parametrize("preset", list(PRESETS))
def test_parameter_tensors_match_the_real_model(preset: str) -> None:
    from engine.tasks.sensorlm.model import build

    config = cfg.load(preset=preset, task="sensorlm")
    with torch.device("meta"):
        model = build(config.task_config.model, config.task_config.data.channels, config.task_config.data.minutes)
    ours = [n for group in slm.param_tensors(slm.Shape.of(config)).values() for n in group]
    theirs = [p.numel() for p in model.parameters()]
    assert sorted(ours) == sorted(theirs)


def test_monotone_in_batch_and_backend_order() -> None:
    config = cfg.load(preset="small", task="sensorlm")
    totals = [analytic.estimate(config, batch_size=b).total for b in (1, 2, 3, 8, 64)]
    assert totals == sorted(totals) and len(set(totals)) == len(totals)
    sdpa = analytic.estimate(config, attn_backend="sdpa").total
    math = analytic.estimate(config, attn_backend="math").total
    chunk = analytic.estimate(config, attn_backend="chunked", attn_chunk=64).total
    ckpt = analytic.estimate(config, activation_checkpointing=True).total
    assert math > chunk and math > sdpa and ckpt < sdpa


def test_breakdown_sums_to_total_and_names_the_components() -> None:
    e = analytic.estimate(small(model={"attn_backend": "math"}, train={"batch_size": 8}), device="cpu")
    assert sum(e.breakdown.values()) == e.total and e.upper_bound and e.source == "analytic"
    assert {"weights", "optimizer", "input"} <= set(e.breakdown)
    assert any(k.startswith("activations: sensor encoder") for k in e.breakdown)
    assert e.breakdown.get("attention N×N: sensor encoder", 0) > 0


def test_a_task_without_an_analytic_model_has_no_closed_form(monkeypatch) -> None:
    import dataclasses

    from engine.core import registry as tasks

    spec = dataclasses.replace(tasks.get_spec("toy"), analytic_memory=None)
    monkeypatch.setattr(tasks, "get_spec", lambda name: spec)
    with pytest.raises(analytic.NoAnalyticModel):
        analytic.estimate(small("toy"))
