"""`sensorlm-tui plot`: a plotext chart of any logged metric, runs overlaid, bad input refused in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.run import events as ev
from tests.conftest import run_cli, run_forked

CAPS = {"primary": {"name": "psnr_db", "label": "PSNR", "unit": "dB", "higher_is_better": True, "kind": "val"}}


def _run(root: Path, name: str, steps: int = 200, capabilities: dict | None = None, evals: bool = True) -> Path:
    run = root / name
    run.mkdir(parents=True)
    lines = [ev.Schema(t=1.0), ev.RunStarted(t=1.0, name=name, task="toy", total_steps=steps,
                                              capabilities=capabilities or {})]
    for i in range(1, steps + 1):
        lines.append(ev.StepLogged(t=1.0 + i, step=i, loss=math.exp(-i / 50), lr=1e-3, grad_norm=10.0 / i,
                                   components={"mse": math.exp(-i / 40)}))
        if evals and i % 20 == 0:
            psnr = 10 + i / 10
            lines.append(ev.EvalDone(t=1.0 + i, step=i, val_loss=math.exp(-i / 60), primary="psnr_db",
                                     metrics={"val_loss": math.exp(-i / 60), "psnr_db": psnr}))
    (run / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in lines))
    return run


def _plot(*args: str) -> tuple[int, str, str]:
    out = run_cli("plot", *args, "--width", "80", "--height", "20")
    return out.returncode, out.stdout, out.stderr


def _has_axes(text: str) -> bool:
    lines = text.splitlines()
    return any("┌" in line for line in lines) and any("└" in line for line in lines) and \
        sum("┤" in line for line in lines) >= 3 and any(line.strip().endswith("step") for line in lines)


def test_default_is_the_primary_metric_with_axes_and_title(tmp_path: Path) -> None:
    rc, out, err = _plot(str(_run(tmp_path, "a", capabilities=CAPS)))
    assert rc == 0, err
    assert _has_axes(out)
    assert "psnr_db (validation) by step" in out.splitlines()[0]
    assert "\x1b[" not in out  # no colour into a pipe
    assert max(len(line) for line in out.splitlines()) <= 80


def test_any_logged_metric_and_runs_overlaid(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "first"), _run(tmp_path, "second", steps=100)
    rc, out, err = _plot(str(a), str(b), "--metric", "grad_norm")
    assert rc == 0, err
    assert "grad_norm (training) by step" in out and _has_axes(out)
    assert "first" in out and "second" in out  # the legend names each run


@pytest.mark.parametrize("caps,evals,expected", [({}, True, "val_loss"), ({}, False, "loss")])
def test_runs_without_capabilities_fall_back(tmp_path: Path, caps: dict, evals: bool, expected: str) -> None:
    rc, out, err = _plot(str(_run(tmp_path, "old", capabilities=caps, evals=evals)))
    assert rc == 0, err
    assert out.splitlines()[0].strip().startswith(f"{expected} (")


def test_unknown_metric_is_one_line_listing_the_runs_metrics(tmp_path: Path) -> None:
    rc, out, err = _plot(str(_run(tmp_path, "a")), "--metric", "accuracy")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no metric 'accuracy'" in err
    for name in ("loss", "grad_norm", "lr", "mse", "val_loss", "psnr_db"):
        assert name in err.split("it has:")[1]


def test_a_run_without_the_metric_is_named_with_what_it_has(tmp_path: Path) -> None:
    """`plot A B` where B never logged A's primary (an LM run beside a toy run): A is drawn, and a line on stderr
    names B, says it was not drawn and lists B's metrics (it was dropped silently)."""
    toy = _run(tmp_path, "toy", capabilities=CAPS)
    lm = _run(tmp_path, "lm", evals=False)  # steps only: loss, lr, grad_norm, mse
    rc, out, err = _plot(str(toy), str(lm))
    assert rc == 0, err
    assert "psnr_db (validation) by step" in out and _has_axes(out)
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"{lm}: not drawn, it has no metric 'psnr_db'" in lines[0]
    have = lines[0].split("it has: ")[1].split(", ")
    assert {"grad_norm", "loss", "lr", "mse"} <= set(have) and "psnr_db" not in have


def test_a_metric_no_run_has_names_each_runs_metrics(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b", evals=False)
    rc, out, err = _plot(str(a), str(b), "--metric", "psnr")
    assert rc == 2 and out == "" and err.count("\n") == 1
    said = dict(part.split(" has: ") for part in err.strip().split("; ")[1:])
    assert {"psnr_db", "val_loss", "mse"} <= set(said[str(a)].split(", "))
    assert "mse" in said[str(b)].split(", ") and "val_loss" not in said[str(b)].split(", ")


def test_missing_run_is_one_line_exit_2(tmp_path: Path) -> None:
    rc, _, err = _plot(str(tmp_path / "nope"))
    assert rc == 2 and err.count("\n") == 1 and "no such run" in err


@pytest.mark.slow
def test_headless_train_draws_the_chart_at_the_end(forks, tmp_path: Path) -> None:
    out = run_forked(forks, "train", "--headless", "--task", "toy", "--max-steps", "12", "--name", "p",
                     "--set", "evaluation.every=6", "--plot", "loss", cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    done = max(i for i, line in enumerate(lines) if line.startswith("done "))
    chart = "\n".join(lines[done + 1:])
    assert "loss (training) by step" in chart and _has_axes(chart)


def test_run_names_reach_the_terminal_escaped(tmp_path: Path) -> None:
    """Runs overlaid are labelled by name: an ESC in a directory's name must not colour the chart, nor the line
    naming a run left out."""
    a, b = _run(tmp_path, "evil\x1b[31mred", capabilities=CAPS), _run(tmp_path, "plain", capabilities=CAPS)
    c = _run(tmp_path, "gone\x1b[0m", evals=False)
    rc, out, err = _plot(str(a), str(b), str(c))
    assert rc == 0 and "\x1b" not in out + err
    assert "evil\\x1b[31mred" in out and "gone\\x1b[0m: not drawn" in err
