"""Per-rank budget: `plan --nproc-per-node N --strategy ddp|fsdp2`, checked against FSDPMemTracker on a fake group.

The transformer is the lm task's random Llama at a width where parameters,
gradients and AdamW state are most of the peak, so sharding them shows (at
the demo's own width the activations dominate and every layout looks alike).
"""

from __future__ import annotations

import argparse
import json

import pytest

from engine.app import plan_cli
from engine.budget import analytic
from engine.budget.guard import check_start
from engine.budget.layout import Layout
from engine.budget.measure import DeviceInfo
from engine.core import config as cfg

#: Full fine-tune Llama, 2 layers of width 128, 4k vocabulary: ~1.5 M parameters, short sequences.
LLAMA = {"lm": {"model": {"hidden_size": 128, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 352,
                          "vocab_size": 4096}, "finetune": "full", "seq_len": 32},
         "train": {"batch_size": 8}, "runtime": {"device": "cpu"}}


def _llama(**train) -> cfg.RunConfig:
    return cfg.load(task="lm", preset="demo", overrides={**LLAMA, "train": {**LLAMA["train"], **train}})


def _plan(capsys, *argv: str) -> dict:
    parser = argparse.ArgumentParser()
    plan_cli.add_arguments(parser)
    args = parser.parse_args(["--task", "lm", "--device", "cpu", "--json",
                              "--set", "lm.model.hidden_size=128", "--set", "lm.model.intermediate_size=352",
                              "--set", "lm.model.vocab_size=4096", "--set", "lm.seq_len=32",
                              "--batch-size", "8", *argv])
    assert plan_cli.main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_per_rank_peak_falls_as_the_sharded_share_falls(capsys) -> None:
    single = _plan(capsys)
    peaks = {n: _plan(capsys, "--nproc-per-node", str(n), "--strategy", "fsdp2") for n in (1, 2, 4)}
    totals = [peaks[n]["estimate"]["total"] for n in (1, 2, 4)]
    assert totals[0] > totals[1] > totals[2], totals
    # every rank gets a row, and the rows are the prediction
    assert [r["rank"] for r in peaks[4]["ranks"]] == [0, 1, 2, 3]
    assert {r["predicted"] for r in peaks[4]["ranks"]} == {totals[2]}
    # what falls is the sharded share: weights and AdamW state halve, the batch share's activations are not sharded
    one, two = peaks[1]["estimate"]["breakdown"], peaks[2]["estimate"]["breakdown"]
    assert two["optimizer"] < 0.52 * one["optimizer"] and two["weights"] < 0.52 * one["weights"]
    assert peaks[2]["estimate"]["settings"]["micro_batch"] == 4
    # FSDP2 on one rank costs more than one plain process: the gathered copies come on top
    assert totals[0] > single["estimate"]["total"]
    # DDP: the whole model on every rank, plus its gradient buckets (a copy of every gradient)
    ddp = _plan(capsys, "--nproc-per-node", "2")
    assert ddp["estimate"]["settings"]["strategy"] == "ddp"
    weights = ddp["estimate"]["breakdown"]["weights"]
    assert 0.99 * weights <= ddp["estimate"]["breakdown"]["DDP gradient buckets"] <= weights  # all but buffers
    assert ddp["estimate"]["total"] > totals[1]


@pytest.mark.slow
def test_fsdp2_prediction_at_two_ranks_is_within_10_percent_of_fsdp_mem_tracker() -> None:
    from engine.budget.trace_worker import trace_fsdp

    config = _llama(batch_size=8)
    layout = Layout(2, "fsdp2")
    predicted = analytic.estimate(config, device="cpu", layout=layout).total
    one_rank = cfg.validate(cfg.deep_merge(config.model_dump(mode="json"), {"train": {"batch_size": 4}}), "test")
    traced = trace_fsdp(one_rank, "cpu", 2)
    print(f"fsdp2 2 ranks: predicted {predicted} traced {traced['peak']} "
          f"({predicted / traced['peak'] - 1:+.1%}) {traced['breakdown']}")
    assert abs(predicted - traced["peak"]) <= 0.10 * traced["peak"], (predicted, traced)
    assert traced["breakdown"]["weights (this rank's shard)"] > 0 and traced["breakdown"]["gathered parameters"] > 0


def test_guard_refuses_a_job_that_fits_no_rank_and_names_ranks_bytes_and_budget() -> None:
    config = _llama(batch_size=8)
    config = cfg.validate({**config.model_dump(mode="json"), "budget": {"vram_gb": 0.001}}, "test")
    result = check_start(config, DeviceInfo(), Layout(2, "fsdp2"))
    assert not result.ok and "\n" not in result.message
    assert "on each of ranks 0-1 (2 ranks, fsdp2)" in result.message and "does not fit the budget" in result.message
    assert "MiB" in result.message or "KiB" in result.message
    fits = cfg.validate({**config.model_dump(mode="json"), "budget": {"vram_gb": 1}}, "test")
    assert check_start(fits, DeviceInfo(), Layout(2, "fsdp2")).ok


@pytest.mark.parametrize("argv, says", [(("--nproc-per-node", "0"), "--nproc-per-node=0: must be >= 1")])
def test_bad_layout_flags_are_one_line_and_exit_2(capsys, argv, says) -> None:
    parser = argparse.ArgumentParser()
    plan_cli.add_arguments(parser)
    assert plan_cli.main(parser.parse_args(["--task", "toy", *argv])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_a_ddp_refusal_offers_fsdp2_when_sharding_would_fit() -> None:
    from engine.budget import plan as planner
    from engine.budget.guard import refusal_options

    config = _llama(batch_size=8)
    ddp = planner.predictor_for(config, "cpu", Layout(2, "ddp"))
    need_ddp, need_fsdp = ddp().total, analytic.estimate(config, device="cpu", layout=Layout(2, "fsdp2")).total
    assert need_fsdp < need_ddp
    budget = planner.Budget(bytes=(need_ddp + need_fsdp) // 2, total=need_ddp, safety=1.0, source="test")
    options = refusal_options(config, ddp, budget, need_ddp, 0, Layout(2, "ddp"))
    assert any(o.startswith("--strategy fsdp2:") and "per rank" in o for o in options), options
    tight = planner.Budget(bytes=need_fsdp - 1, total=need_fsdp, safety=1.0, source="test")
    assert not any("--strategy" in o for o in refusal_options(config, ddp, tight, need_ddp, 0, Layout(2, "ddp")))
