"""RunModel: events folded into what the panels show."""

from __future__ import annotations

from engine.run import events as ev
from tui.dashboard.scripted import demo_run
from tui.model.dashboard import RunModel


def _started(**policies):
    return ev.RunStarted(name="r", total_steps=100, config={"policies": policies}, t=1000.0)


def test_eta_waits_for_ten_steps_and_ten_seconds():
    m = RunModel()
    m.ingest([_started()])
    m.ingest([ev.StepLogged(step=s, loss=1.0, t=1000.0 + s * 0.1) for s in range(1, 50)])
    assert m.eta_seconds() is None, "49 steps but only 4.9 s: still warming up"
    m2 = RunModel()
    m2.ingest([_started()] + [ev.StepLogged(step=s, loss=1.0, t=1000.0 + s * 2.0) for s in range(1, 6)])
    assert m2.eta_seconds() is None, "10 s passed but only 4 steps"
    m2.ingest([ev.StepLogged(step=s, loss=1.0, t=1000.0 + s * 2.0) for s in range(6, 21)])
    assert abs(m2.eta_seconds() - 80 * 2.0) < 1e-6  # 80 steps left at 0.5 steps/s


def _caps(name: str, higher: bool, unit: str = "") -> dict:
    return {"primary": {"name": name, "label": name, "unit": unit, "higher_is_better": higher, "kind": "val"}}


def test_best_and_abort_line_follow_the_primary_metrics_direction():
    up = RunModel()
    up.ingest([ev.RunStarted(name="r", config={"policies": {"abort_drop": 2.0, "abort_patience": 3}},
                             capabilities=_caps("acc", True), t=1000.0),
               ev.EvalDone(step=10, metrics={"val_loss": 1.0, "acc": 20.0}, primary="acc"),
               ev.EvalDone(step=20, metrics={"val_loss": 0.9, "acc": 25.0}, primary="acc"),
               ev.EvalDone(step=30, metrics={"val_loss": 0.8, "acc": 24.0}, primary="acc")])
    assert up.best_primary() == (20, 25.0)
    assert up.abort_threshold() == 23.0, "higher is better: the line sits below the best"
    down = RunModel()
    down.ingest([ev.RunStarted(name="r", config={"policies": {"abort_drop": 0.5}}, capabilities=_caps("ppl", False)),
                 ev.EvalDone(step=10, metrics={"ppl": 9.0}), ev.EvalDone(step=20, metrics={"ppl": 7.0}),
                 ev.EvalDone(step=30, metrics={"ppl": 8.0})])
    assert down.best_primary() == (20, 7.0)
    assert down.abort_threshold() == 7.5, "lower is better: the line sits above the best"
    up.ingest([_started(abort_patience=0)])
    assert up.abort_threshold() is None, "patience 0 means the engine never aborts"


def test_a_run_without_capabilities_falls_back_to_val_loss():
    m = RunModel()
    m.ingest([_started(abort_drop_db=0.25), ev.EvalDone(step=10, val_loss=1.0), ev.EvalDone(step=20, val_loss=0.5),
              ev.EvalDone(step=30, val_loss=0.7)])
    assert m.primary.name == "val_loss" and not m.primary.higher_is_better
    assert m.best_primary() == (20, 0.5)
    assert m.abort_threshold() == 0.75, "the older abort_drop_db still sets the guide line"


def test_every_logged_scalar_is_a_choice_primary_first_and_val_overlays_train():
    m = RunModel()
    m.ingest(demo_run(120))
    names = [c.name for c in m.choices()]
    assert names[0] == "score" and m.choices()[0].primary
    assert {"loss", "val_loss", "recall_at_1", "recon", "align", "grad_norm", "lr", "samples_per_s"} <= set(names)
    assert m.pair("loss") == ("loss", "val_loss") and m.pair("val_loss") == ("loss", "val_loss")
    assert m.pair("grad_norm") == ("grad_norm", None)
    x, y = m.series.window("grad_norm", 0, 10**9)
    assert len(x) == 120 and x[0] == 1 and abs(y[0] - demo_run(1)[1].grad_norm) < 1e-12
    assert m.describe("score").unit == "dB" and m.describe("recon").label == "recon loss"


def test_phases_are_listed_until_the_first_step():
    m = RunModel()
    m.ingest([ev.PhaseStarted(phase="importing torch", t=100.0), ev.PhaseStarted(phase="building model",
                                                                                  detail="1.2M params", t=101.5)])
    assert m.starting_up
    assert m.phase_lines(now=104.0) == ["✓ importing torch 1.5s", "… building model (1.2M params) 2.5s"]
    m.ingest(demo_run(1))
    assert not m.starting_up


def test_the_phase_in_progress_told_again_stays_one_phase_with_its_first_clock():
    m = RunModel()
    m.ingest([ev.PhaseStarted(phase="importing torch", t=100.0), ev.PhaseStarted(phase="importing torch", t=100.4),
              ev.PhaseStarted(phase="building model", t=101.0)])
    assert m.phase_lines(now=102.0) == ["✓ importing torch 1.0s", "… building model 1.0s"]


def test_compiling_is_a_start_up_phase_with_its_seconds_and_a_recompile_is_logged_with_its_reason():
    m = RunModel()
    m.ingest([ev.PhaseStarted(phase="compiling", detail="torch.compile (inductor) of the model", t=100.0)])
    assert m.phase_lines(now=112.0) == ["… compiling (torch.compile (inductor) of the model) 12.0s"]
    m.ingest([ev.CompileDone(step=1, seconds=11.5, frames=1, first=True, mode="model", backend="inductor", t=112.0),
              ev.CompileDone(step=40, seconds=2.0, frames=1, recompiles=1, total_recompiles=1, mode="model",
                             reasons=["0/0: tensor 'x' size mismatch at index 0. expected 16, actual 24"], t=130.0)])
    lines = [(e.kind, e.text) for e in m.take_log()]
    assert ("state", "compiled 1 function(s) in 11.5 s (model, inductor)") in lines
    assert ("warning", "recompiled 1 in 2.0 s (1 so far): 0/0: tensor 'x' size mismatch at index 0. expected 16, "
            "actual 24") in lines


def test_an_ack_seen_twice_is_logged_once_and_marks_the_plot():
    m = RunModel()
    m.ingest(demo_run(20))
    m.take_log()
    ack = ev.SettingChanged(name="lr", old=0.002, new=0.001, step=20, request_id="1-7")
    m.ingest_ack(ack)  # from send()
    m.ingest([ack])  # and again from the stream
    lines = [e.text for e in m.take_log()]
    assert lines == ["lr: 0.002 → 0.001"]
    assert [(k.step, k.name, k.new) for k in m.markers] == [(10, "batch_size", 32), (20, "lr", 0.001)]
    m.ingest([ev.SettingChanged(name="state", old="running", new="paused", request_id="1-8")])
    assert len(m.markers) == 2, "a pause ack is not a setting change"


def test_crash_without_run_finished_marks_crashed_and_interrupted_means_aborted():
    m = RunModel()
    m.ingest(demo_run(20))
    m.set_liveness("crashed")
    assert m.state == "crashed" and m.ended  # the word `runs` uses
    assert m.summary().startswith("demo-run: crashed at step 20 · ")
    assert [e.text for e in m.take_log()][-1] == \
        "crashed: the engine's process is gone without finishing (no heartbeat)"
    m2 = RunModel()
    m2.ingest(demo_run(20) + [ev.RunFinished(status="interrupted", steps=20, checkpoint="ck/last",
                                             resume_command="sensorlm-tui train --resume runs/x", exit_code=130)])
    assert m2.state == "aborted"
    assert m2.summary() == ("demo-run: interrupted at step 20 · checkpoint ck/last · "
                            "resume: sensorlm-tui train --resume runs/x")


def test_current_settings_follow_changes_then_steps_then_config():
    m = RunModel()
    m.ingest(demo_run(300))
    assert m.setting("batch_size") == 32  # changed at step 150
    assert m.setting("kernel") == "fast"  # declared by the task: read at its path (demo.kernel)
    assert m.setting("depth") == 2  # undeclared: the first config section that has it
    assert m.budget_bytes() == 8 << 30 and m.capacity_bytes() == 16 << 30


def test_routine_checkpoint_states_and_duplicate_acks_stay_out_of_the_log():
    m = RunModel()
    m.ingest(demo_run(5))
    m.take_log()
    m.ingest([ev.StateChanged(state="checkpointing", step=5), ev.CheckpointSaved(step=5, path="ck/last", bytes=2048),
              ev.StateChanged(state="running", step=5),
              ev.SettingChanged(name="checkpoint", old=None, new="ck/last", request_id="1-1"),
              ev.StateChanged(state="paused", reason="paused by request", step=5),
              ev.SettingChanged(name="state", old="running", new="paused", request_id="1-2")])
    assert [e.text for e in m.take_log()] == ["checkpoint (last) ck/last · 2 KiB in 0.00s",
                                              "state → paused: paused by request"]
    assert m.state == "paused"


def test_memory_panel_says_when_nothing_is_measurable():
    from tui.widgets.memory import MemoryPanel

    m = RunModel()
    m.ingest(demo_run(5, budget=0, capacity=0) + [ev.MemorySampled(step=5, device="cpu")])
    assert MemoryPanel.gauge_and_numbers(m, 40) == "[$text-muted]cpu: memory is not measured[/]"
    m.ingest(demo_run(10))
    text = MemoryPanel.gauge_and_numbers(m, 40)
    gauge = text.splitlines()[0]
    # (2.09 − 2.06) / 2.06
    assert "[$success]meas 2.06[/] · [$primary]pred 2.09 GiB[/]" in text and "err [b]+1.8 %[/b]" in text
    assert gauge.startswith("[$success]█████[/]") and gauge.index("┃") > gauge.index("█")


def test_memory_panel_shows_predicted_against_measured_on_cpu_without_dashes():
    from tui.widgets.memory import MemoryPanel

    m = RunModel()
    m.ingest(demo_run(5, budget=0, capacity=0) + [ev.MemorySampled(step=5, device="cpu", peak=110 << 20,
                                                                   predicted=100 << 20, budget=8 << 30)])
    text = MemoryPanel.gauge_and_numbers(m, 40)
    assert "meas 110[/] · [$primary]pred 100 MiB" in text and "err [b]-9.1 %[/b]" in text
    assert "–" not in text, "unknown numbers are left out, not shown as dashes"


def test_the_summary_says_how_the_engine_ended_when_its_last_events_have_not_arrived():
    """Seen in CI (attach e2e): after a graceful abort the viewer left on the polled liveness ("aborted") before
    the engine's final state and RunFinished reached it, and printed "running at step 244"."""
    m = RunModel()
    m.ingest(demo_run(20))
    assert m.state == "running"
    m.set_liveness("aborted")
    assert m.ended and m.summary().startswith("demo-run: aborted at step 20")


def _jittery_steps(batch: int, tokens: int, n: int = 120) -> list[ev.StepLogged]:
    """Steps every 0.1 s whose own rates jump around 100 steps/s (they time the compute alone)."""
    out = []
    for i in range(1, n + 1):
        own = 100.0 * (1 + 0.5 * (i % 4))
        out.append(ev.StepLogged(t=1000.0 + 0.1 * i, step=i, loss=1.0, steps_per_s=own, samples_per_s=own * batch,
                                 tokens_per_s=own * batch * tokens, batch_size=batch))
    return out


def test_the_throughput_numbers_agree_from_one_window(tmp_path):
    """The progress panel showed a smoothed steps/s beside the last step's own samples/s (14.5 it/s · 1100 sa/s ·
    bs 32). The model's throughput is one window's: steps/s × batch = samples/s and samples/s × tokens a sample =
    tokens/s within 5 %, and the same whether the steps arrived live or from the log on attach."""
    from engine.run.history import read_history

    batch, tokens = 32, 64
    events = [_started(batch_size=batch), *_jittery_steps(batch, tokens)]
    live = RunModel()
    live.ingest(events)
    rates = live.throughput()
    assert abs(rates.steps_per_s - 10.0) < 0.1 and rates.steps_per_s == live.steps_per_s()
    assert abs(rates.samples_per_s / (rates.steps_per_s * batch) - 1) < 0.05
    assert abs(rates.tokens_per_s / (rates.samples_per_s * tokens) - 1) < 0.05
    log = tmp_path / "events.jsonl"
    log.write_text("".join(ev.to_json(e) + "\n" for e in [ev.Schema(t=1000.0), *events]))
    attached = RunModel()
    attached.ingest(read_history(log))
    assert attached.throughput() == rates
    from engine.run.steps import StepWriter, open_record
    from tui.model.step_source import RecordSteps

    writer = StepWriter(tmp_path / "steps")  # the engine's record of the same steps (rates as float32)
    for event in events[1:]:
        writer.append_event(event)
    writer.close()
    recorded = RunModel()
    recorded.open_steps(RecordSteps(open_record(tmp_path)))
    recorded.ingest(read_history(log, steps=False))
    again = recorded.throughput()
    for name in ("steps_per_s", "samples_per_s", "tokens_per_s"):
        assert abs(getattr(again, name) / getattr(rates, name) - 1) < 1e-6, name


def test_a_run_that_does_not_count_its_samples_has_no_samples_rate():
    """An integration given no batch size logs samples_per_s 0 (the panel said "0 samples/s"): unknown is None."""
    m = RunModel()
    m.ingest([_started()] + [ev.StepLogged(step=i, loss=1.0, t=1000.0 + 0.5 * i, steps_per_s=2.0 if i > 1 else 0.0)
                             for i in range(1, 21)])
    rates = m.throughput()
    assert abs(rates.steps_per_s - 2.0) < 1e-9 and rates.samples_per_s is None and rates.tokens_per_s is None


def test_the_exit_line_gives_the_step_its_checkpoint_holds():
    """Stopped at once at step 6, the line said "checkpoint …/last.safetensors", a file from step 0 (engine.log
    said "no checkpoint written"). It says which step a resume starts from; a crash (no ending heard) is called
    crashed, as `runs` calls it, with the newest checkpoint's step."""
    path = "runs/r/checkpoints/last.safetensors"
    head = [_started(), ev.CheckpointSaved(step=0, path=path, kind="last", t=1000.0)]
    steps = [ev.StepLogged(step=s, loss=1.0, t=1000.0 + s) for s in range(1, 7)]
    m = RunModel()
    m.ingest(head + steps + [ev.RunFinished(status="interrupted", steps=6, checkpoint=path, checkpoint_step=0,
                                            exit_code=130, t=1007.0)])
    assert m.summary() == f"r: interrupted at step 6 · no checkpoint at step 6; a resume starts from step 0 ({path})"
    stopped = RunModel()
    stopped.ingest(head + steps + [ev.CheckpointSaved(step=6, path=path, kind="final", t=1007.0),
                                   ev.RunFinished(status="aborted", steps=6, checkpoint=path, checkpoint_step=6)])
    assert stopped.summary().endswith(f"aborted at step 6 · checkpoint {path}")
    crashed = RunModel()
    crashed.ingest(head + steps)
    crashed.set_liveness("crashed")
    assert crashed.summary() == f"r: crashed at step 6 · no checkpoint at step 6; a resume starts from step 0 ({path})"


def test_a_killed_script_is_called_crashed_as_runs_calls_it_never_an_engine():
    """A user's own loop killed: `runs` said crashed, the dashboard FAILED and "engine crashed" (there is no engine).
    The exit line and the log say crashed, and whose process it was."""
    m = RunModel()
    m.ingest([ev.RunStarted(name="mine", task="loop", total_steps=100, t=1000.0,
                            config={"integration": {"framework": "loop", "command": "cd /x && python train.py"}}),
              *[ev.StepLogged(step=s, loss=1.0, t=1000.0 + s) for s in range(1, 44)]])
    m.set_liveness("crashed")
    said = [entry.text for entry in m.take_log()]
    assert "crashed: your script's process is gone without finishing (no heartbeat)" in said
    assert not any("engine" in text for text in said)
    assert m.summary().startswith("mine: crashed at step 43")


def test_a_whole_historys_fold_words_only_the_log_lines_the_panel_keeps_and_keeps_every_eval(tmp_path):
    """A 100M-step run's history holds 10,000 evals; the log panel keeps the newest LOG_KEPT lines. Folding the
    history whole (one bulk fold) gives the panel exactly the lines folding it event by event gives, and the
    catalogue every eval, while wording only the evals whose line can still be shown."""
    from engine.run.history import read_history
    from tui.model.event_fold import LOG_KEPT

    events = [ev.RunStarted(t=1.0, name="long", total_steps=10**8)]
    for i in range(2 * LOG_KEPT + 500):
        events.append(ev.EvalDone(t=2.0 + i, step=10_000 * (i + 1), val_loss=1.0 / (i + 1), is_best=i % 3 == 0,
                                  seconds=0.5))
        if i % 700 == 0:
            events.append(ev.StateChanged(t=2.0 + i, state="paused", reason=f"pause {i}", step=10_000 * (i + 1)))
    path = tmp_path / "events.jsonl"
    path.write_text("".join(ev.to_json(e) + "\n" for e in events))
    one_by_one = RunModel()
    one_by_one.ingest(list(events))
    bulk, worded = RunModel(), []
    words = bulk.log
    bulk.log = lambda kind, text, step=None: (worded.append(step) if kind == "eval" else None, words(kind, text, step))
    bulk.ingest(read_history(path))
    assert [(e.kind, e.text, e.step) for e in bulk.take_log()] == \
        [(e.kind, e.text, e.step) for e in one_by_one.take_log()][-LOG_KEPT:]
    assert len(bulk.catalogue.evals) == len(one_by_one.catalogue.evals) == 2 * LOG_KEPT + 500
    assert bulk.catalogue.evals == one_by_one.catalogue.evals
    assert len(worded) == LOG_KEPT
