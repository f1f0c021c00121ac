"""Terms the budget once left out, each against a step counted for real: never under, at most +10 % over.

Each case is one the budget was found under on (issue 39): an adapter's dropout, the batches a data path
builds ahead, and a chunked attention's checkpoint snapshots inside a checkpointed block. The truth is the
step itself, counted through the dispatcher (engine.budget.truth, "dispatcher", three steps), or the
allocator's own events where what was missing is not a tensor ("profiler").
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from engine.budget import analytic, truth
from engine.budget.trace_worker import trace as trace_in_process
from engine.core import config as cfg
from tests.conftest import ROOT, cli_env

MIB = 1 << 20


def _report(what: str, predicted: int, real: int) -> float:
    error = (predicted - real) / real * 100
    print(f"\n{what}: predicted {predicted / MIB:.2f} MiB, counted {real / MIB:.2f} MiB ({error:+.2f} %)")
    return error


@pytest.mark.slow
def test_lora_dropout_is_counted_by_the_bound_and_the_trace() -> None:
    # The case: LoRA on every projection of the demo shape, batch 12, 300 tokens, dropout 0.1
    # (predicted 44.67 MiB, the step held 64.42: each adapter's dropout keeps its output and its mask).
    torch.set_num_threads(1)
    config = cfg.load(task="lm", preset="demo", overrides={
        "lm": {"finetune": "lora", "seq_len": 300, "lora": {"dropout": 0.1}},
        "train": {"batch_size": 12}, "runtime": {"device": "cpu"}})
    real = truth.peak(config, "dispatcher", steps=3)
    bound = analytic.estimate(config, device="cpu").total
    traced = trace_in_process(config, "cpu")["peak"]
    error = _report("LoRA b12 s300 dropout 0.1, analytic", bound, real)
    assert 0 <= error <= 10
    assert abs(traced - real) <= 0.02 * real, (traced, real)
    # the value does not change what is kept (a mask and an output per adapter), only whether there is one
    other = cfg.load(task="lm", preset="demo", overrides={
        "lm": {"finetune": "lora", "seq_len": 300, "lora": {"dropout": 0.5}}, "train": {"batch_size": 12}})
    assert analytic.estimate(other, device="cpu").total == bound


@pytest.mark.slow
def test_lora_with_trained_norms_and_dropout_traces_like_the_real_step() -> None:
    # lm.lora.train_norms: peft deep-copies each norm it trains while the model is built, which on fake tensors
    # made tensors of another fake mode: the trace failed ("Mixing fake modes NYI"), and freeing them crashed.
    torch.set_num_threads(1)
    config = cfg.load(task="lm", preset="tiny", overrides={
        "lm": {"lora": {"train_norms": True, "dropout": 0.1}}, "train": {"batch_size": 4},
        "runtime": {"device": "cpu"}})
    real = truth.peak(config, "dispatcher", steps=3)
    traced = trace_in_process(config, "cpu")["peak"]
    assert abs(_report("tiny LoRA, trained norms, dropout 0.1, traced", traced, real)) <= 2
    assert 0 <= _report("the same, analytic", analytic.estimate(config, device="cpu").total, real) <= 10


def test_chunk_snapshots_inside_a_checkpointed_block_are_counted_until_its_backward() -> None:
    # Every query chunk of ``chunked`` is a checkpoint call with a generator snapshot; inside a checkpointed block
    # the graph still holds each call's frame until the block's backward (and its recompute makes a second set).
    # Host memory no tensor trace sees: the allocator's events are the truth here. Issue 39's H200 case (tiny,
    # batch 64, chunk 16, checkpointing) held 768 of them, 3.7 MiB.
    # Counted in a fresh interpreter, as an engine counts its first steps: inside the test worker, what an earlier
    # test left allocated (seen: 0.30 MiB less when the fast subset ran other budget tests first) is not counted.
    from tests.engine.budget.conftest import small

    changes = dict(model={"activation_checkpointing": True, "attn_backend": "chunked", "attn_chunk": 8},
                   train={"batch_size": 4})
    config = small(**changes)
    counted = subprocess.run(
        [sys.executable, "-c", "import sys, torch; torch.set_num_threads(1)\n"
         "from engine.budget import truth\nfrom tests.engine.budget.conftest import small\n"
         f"print(truth.peak(small(**{changes!r}), 'profiler'))"],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert counted.returncode == 0, counted.stderr[-2000:]
    real = int(counted.stdout.split()[-1])
    error = _report("SensorLM small, chunked 8 + checkpointing, batch 4", analytic.estimate(config, device="cpu").total,
                    real)
    assert 0 <= error <= 10


@pytest.mark.slow
def test_batches_built_ahead_are_in_a_cpu_budget() -> None:
    # A batch far larger than the model's activations (the toy: length 10080, batch 8, a 62 MB batch
    # against an 8 kB margin). The builder thread keeps one micro-batch ahead; two workers keep four.
    torch.set_num_threads(1)
    from engine.budget import trace

    shape = {"toy": {"channels": 8, "length": 2048, "dim": 16}}
    for workers, ahead, accum in ((0, 1, 1), (2, 4, 3)):
        config = cfg.load(task="toy", overrides={**shape, "train": {
            "batch_size": 48, "grad_accum": accum}, "runtime": {"device": "cpu", "data_workers": workers}})
        real = truth.peak(config, "dispatcher", steps=3, ahead=ahead)
        estimate = analytic.estimate(config, device="cpu")
        error = _report(f"toy 16384 values a sample, batch 48, data_workers {workers}", estimate.total, real)
        assert 0 <= error <= 10 and estimate.settings["batches_ahead"] == ahead
        micro = 48 // accum  # each batch ahead is a micro-batch: target, mask and masked, fp32
        assert estimate.breakdown["batches built ahead"] == ahead * 3 * 4 * micro * 16384
    traced = trace.trace(config, use_cache=False)  # a traced task's prediction adds them the same way
    assert traced.breakdown["batches built ahead"] == estimate.breakdown["batches built ahead"]
    assert 0 <= (traced.total - real) / real * 100 <= 10
    # on a GPU they stay on the host: not in a device budget
    assert "batches built ahead" not in analytic.estimate(config, device="cuda").breakdown


def test_the_bound_on_batches_ahead_covers_every_data_plan() -> None:
    from engine.budget import ahead
    from engine.training import threads

    measured = [None, threads.Costs(0.001, 0.1), threads.Costs(0.05, 0.1), threads.Costs(0.2, 0.05),
                threads.Costs(5.0, 0.01)]
    for usable in (1, 2, 3, 8):
        for prefetch in (False, True):
            for workers in (-1, 0, 1, 3):
                for costs in measured:
                    plan = threads.plan(threads.Cores(usable), False, costs, 10**6, 0, workers, prefetch)
                    assert plan.depth <= ahead.depth(prefetch, workers, usable), (usable, prefetch, workers, costs)
    assert ahead.PER_WORKER == threads.WORKER_AHEAD


def test_force_passes_the_budget_but_never_the_machine() -> None:
    # The case: a forced batch of 10⁶ (predicted 40 GiB on a 23 GB box) was applied. Here a sample is 192 kB
    # of input alone: 10⁶ of them are ~190 GiB, more RAM than any machine these tests run on.
    from engine.run import events as ev
    from engine.run.control.requests import Controls, Request
    from engine.run.sinks import EventBus, MemorySink
    from engine.training.loop import Trainer

    torch.set_num_threads(1)
    config = cfg.load(task="toy", overrides={"toy": {"channels": 8, "length": 2048, "dim": 16},
                                             "train": {"max_steps": 2, "batch_size": 4},
                                             "evaluation": {"every": 0}, "runtime": {"device": "cpu"},
                                             "budget": {"vram_gb": 0.1}})
    sink = MemorySink()
    trainer = Trainer(config, EventBus([sink]), Controls())
    trainer.setup()
    started = trainer.budget.on_start(trainer.settings)
    machine = trainer.budget.info.total
    trainer.control.apply([Request("set", name="batch_size", value=1_000_000, force=True)])
    refused = [e for e in sink.drain() if isinstance(e, ev.Refused)]
    assert refused and "exceeds this machine's memory" in refused[-1].why and "\n" not in refused[-1].why
    assert refused[-1].predicted > machine and trainer.settings.batch_size == 4
    print(f"\nforced batch 10⁶ refused: {refused[-1].why}")
    # a forced change past the budget but within the machine is still applied
    over_budget = 2 * started.largest_batch
    assert trainer.budget.check_change({"batch_size": over_budget}, force=False)
    trainer.control.apply([Request("set", name="batch_size", value=over_budget, force=True)])
    assert trainer.settings.batch_size == over_budget


@pytest.mark.slow
def test_a_nanogpt_loop_in_the_cockpit_is_predicted_never_under(tmp_path) -> None:
    # The probe: nanoGPT's train.py with the plain loop's cockpit, loss_fn and example_batch given, was
    # predicted 11,702,684 B for a step counted at 11,874,628 (−1.4 %, headroom included): its loop holds the
    # logits and loads the next batch before the backward, which the trace did not. Shapes where the logits and
    # the batch weigh most: a small model, a long block, a wide vocabulary.
    from sensorlm_tui.loop import cockpit
    from tests.conftest import read_events
    from tests.engine.budget.nanogpt import GPT, batches

    torch.set_num_threads(1)
    for name, (vocab, block, layers, heads, n, batch) in {"char": (65, 16, 2, 4, 32, 32),
                                                          "gpt2 vocab": (50304, 32, 1, 2, 32, 16)}.items():
        torch.manual_seed(0)
        model = GPT(vocab, block, layers, heads, n)
        optimizer, get_batch = model.optimizer(), batches(vocab, block, batch)
        X, Y = get_batch()
        run_dir = tmp_path / name.replace(" ", "_")
        with cockpit(run_dir, model=model, optimizer=optimizer, total_steps=3, loss_fn=lambda m, b: m(*b)[1],
                     example_batch=(X, Y)) as run:
            for _ in range(run.start_step, 3):
                logits, loss = model(X, Y)
                X, Y = get_batch()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                run.step(loss=loss)
        counted = [e for e in read_events(run_dir) if e["type"] == "memory" and e.get("peak")]
        assert counted, "the cockpit counted no step"
        error = _report(f"nanoGPT-shaped, {name}, batch {batch}, block {block}", counted[-1]["predicted"],
                        counted[-1]["peak"])
        assert 0 <= error <= 10


def test_a_toy_wider_than_its_samples_is_at_most_ten_percent_over() -> None:
    # Drawn by the random configurations' bench: hidden width 256 over 64 values a sample, where each backward's
    # input gradient (B·h) was counted twice (+10.44 %).
    torch.set_num_threads(1)
    config = cfg.load(task="toy", overrides={"toy": {"channels": 2, "length": 32, "dim": 256, "depth": 3},
                                             "train": {"batch_size": 212}, "runtime": {"device": "cpu",
                                                                                       "prefetch": False}})
    real = truth.peak(config, "dispatcher", steps=3)
    assert 0 <= _report("toy dim 256 depth 3, 64 values, batch 212", analytic.estimate(config, device="cpu").total,
                        real) <= 10
