"""What a user's loop hands the cockpit is theirs: values it cannot read never end their training, and a NaN is
never the best. In this process, through the public plain-loop API (the callbacks read through the same core)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from sensorlm_tui.loop import cockpit
from tests.conftest import ROOT, cli_env, output, read_events

#: Values no chart can show, each under its own name (the issue's four, and a few more).
UNREADABLE = {"text": "abc", "items": [1, 2], "triple": torch.ones(3), "huge": 10**400, "flag": True,
              "pair": torch.tensor([1.0, 2.0]), "complex": 1 + 2j}
STEPS = 8
#: The step from which ``flaky`` turns bad (a metric that breaks mid-run, at a logged step).
TURNS_BAD = 5


def _no_bare_nan(text: str):
    def refuse(constant: str):
        raise AssertionError(f"{constant} in JSON: {text[:300]}")

    return json.loads(text, parse_constant=refuse)


def _loop(run: Path, evals: list, metrics=lambda step: {}) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with cockpit(run, model=model, optimizer=optimizer, total_steps=STEPS, log_every=1) as loop:
        for step in range(STEPS):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loop.step(loss=loss, **metrics(step))
            if evals:
                loop.eval(**evals.pop(0))


def test_a_metric_the_cockpit_cannot_read_is_dropped_with_one_warning_naming_it(tmp_path, caplog) -> None:
    run = tmp_path / "values"
    evals = [{"val_loss": 0.5, "note": "fine", "big": 10**400} for _ in range(STEPS)]
    def metrics(step: int) -> dict:
        return {"good": torch.tensor(0.25), "flaky": 0.5 if step + 1 < TURNS_BAD else "n/a", **UNREADABLE}

    with caplog.at_level(logging.WARNING, logger="sensorlm_tui"):
        _loop(run, evals, metrics)
    events = read_events(run)
    finished = events[-1]
    assert finished["type"] == "run_finished" and finished["status"] == "finished" and finished["steps"] == STEPS
    bad = [*UNREADABLE, "flaky", "note", "big"]
    warned = [e["text"] for e in events if e["type"] == "warning" and e["text"].startswith("metric ")]
    assert sorted(warned) == sorted(set(warned)) and len(warned) == len(bad), warned  # once per name
    for name in bad:
        assert sum(f"metric {name!r}:" in text for text in warned) == 1, (name, warned)
    said = [r.getMessage() for r in caplog.records if r.name == "sensorlm_tui"]
    assert sorted(said) == sorted(warned) and all("\n" not in line for line in said)
    assert any("an int too large for a float (401 digits)" in t for t in warned)
    assert any("a Tensor of 3 elements" in t for t in warned)
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, STEPS + 1))
    assert all(set(e["components"]) <= {"good", "flaky"} and e["components"]["good"] == 0.25 for e in steps)
    assert [("flaky" in e["components"]) for e in steps] == [s + 1 < TURNS_BAD for s in range(STEPS)]
    assert all(e["metrics"] == {"val_loss": 0.5} for e in events if e["type"] == "eval")


def test_a_first_eval_of_nan_never_becomes_the_best_and_runs_json_has_no_bare_nan(tmp_path) -> None:
    run = tmp_path / "runs" / "nan"
    evals = [{"val_loss": float("nan")}, {"val_loss": 0.5}, {"val_loss": float("nan")}, {"val_loss": 0.4}]
    _loop(run, evals)
    seen = [(e["best"], e["is_best"]) for e in read_events(run) if e["type"] == "eval"]
    assert seen == [(None, False), (0.5, True), (0.5, False), (0.4, True)], seen
    status = _no_bare_nan((run / "status.json").read_text())
    assert status["best"] == 0.4
    listed = subprocess.run([sys.executable, "-m", "tui.cli", "runs", str(run.parent), "--json"], cwd=ROOT,
                            env=cli_env(), capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, output(listed)
    (record,) = _no_bare_nan(listed.stdout)
    assert record["best"] == 0.4 and record["best_metric"] == "val_loss"
