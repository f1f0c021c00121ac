"""`sensorlm-tui plan`: the table, JSON, one-line errors with exit 2, and no torch import."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from engine.app import plan_cli
from tests.conftest import run_cli


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    plan_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_table_lists_breakdown_batches_and_recommendation(capsys) -> None:
    assert plan_cli.main(_args("--preset", "base", "--vram-gb", "80")) == 0
    out = capsys.readouterr().out
    assert "predicted peak" in out and "activations: sensor encoder" in out and "optimizer" in out
    assert "largest batch" in out and "attn_backend chunked, attn_chunk 256" in out \
        and "recommendation: --activation-checkpointing false --attn-backend sdpa" in out
    table = out[out.index("  setting"):].split("\n\n")[0].splitlines()
    ends = {line.index("largest batch") + len("largest batch") if "largest batch" in line
            else re.search(r"\d+(?= +[\d.]+ [KMG]?i?B (fits|over))", line).end() for line in table}
    assert len(ends) == 1, "the batch column lines up on every row:\n" + "\n".join(table)
    assert " False" not in out.split("budget")[-1] and "activation_checkpointing off" in out, "flags read on / off"


def test_json_output(capsys) -> None:
    assert plan_cli.main(_args("--preset", "tiny", "--vram-gb", "16", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["estimate"]["total"] > 0 and data["budget"]["bytes"] > 0 and data["options"]
    assert data["recommended"]["largest_batch"] >= 1


@pytest.mark.parametrize("argv, field", [(("--batch-size", "0"), "--batch-size"),
                                         (("--vram-gb", "-1"), "--vram-gb"),
                                         (("--safety", "2"), "--safety"),
                                         (("--preset", "huge"), "--preset")])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, field) -> None:
    assert plan_cli.main(_args(*argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_cli_plan_runs_without_torch() -> None:
    proc = run_cli("plan", "--preset", "base", "--vram-gb", "80", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recommended"]["settings"]["attn_backend"] == "sdpa"


def test_plan_for_a_gpu_without_one_reserves_the_context_and_says_so(capsys) -> None:
    assert plan_cli.main(_args("--vram-gb", "8", "--device", "cuda", "--json")) == 0
    budget = json.loads(capsys.readouterr().out)["budget"]
    assert budget["reserve"] >= 750 << 20 and budget["reserve_source"].startswith("assumed")
    assert plan_cli.main(_args("--vram-gb", "8", "--device", "cuda")) == 0
    out = capsys.readouterr().out
    assert "800.0 MiB context [assumed: device unknown" in out, out


def test_plan_for_cuda_without_cuda_predicts_every_task_or_refuses_in_one_line(capsys, monkeypatch) -> None:
    # The gap-filler has no closed form: it is traced, and this machine cannot trace CUDA (a laptop planning
    # a GPU run). The trace runs on the CPU and the plan says so; a trace that fails is one line, exit 2.
    from engine.budget import trace
    from engine.core.estimate import Estimate

    traced_on: list[str] = []

    def fake_trace(config, batch_size=None, device="cpu", layout=None, **settings):
        traced_on.append(device)
        return Estimate(total=(30 + batch_size) << 20, breakdown={"x": 1}, upper_bound=False, source="trace",
                        settings={"device": device})

    monkeypatch.setattr(trace, "trace_device", lambda target: "cpu")
    monkeypatch.setattr(trace, "trace", fake_trace)
    for task in ("sensorlm", "lm", "toy", "gapfill"):
        assert plan_cli.main(_args("--task", task, "--device", "cuda", "--json")) == 0, task
        estimate = json.loads(capsys.readouterr().out)["estimate"]
        assert estimate["total"] > 0
    assert traced_on == ["cpu", "cpu"] and estimate["source"].startswith("trace on cpu (no cuda to trace here")
    assert "on cpu, for cuda" in next(iter(estimate["breakdown"]))

    def failing(*args, **kwargs):
        raise trace.TraceError("memory trace failed: RuntimeError: PyTorch is not linked with support for cuda")

    monkeypatch.setattr(trace, "trace", failing)
    assert plan_cli.main(_args("--task", "gapfill", "--device", "cuda")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot plan this run here" in err and "Traceback" not in err
