"""RunModel: events folded into what the panels show."""

from __future__ import annotations

from engine import events as ev
from tui.model import RunModel
from tui.scripted import demo_run


def _started(**config):
    return ev.RunStarted(name="r", total_steps=100, config={"train": config}, t=1000.0)


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


def test_abort_threshold_is_best_minus_the_configured_drop():
    m = RunModel()
    m.ingest([_started(abort_drop_db=2.0, abort_patience=3),
              ev.EvalDone(step=10, val_loss=1.0, psnr_db=20.0), ev.EvalDone(step=20, val_loss=0.9, psnr_db=25.0),
              ev.EvalDone(step=30, val_loss=0.9, psnr_db=24.0)])
    assert m.best_psnr() == (20, 25.0)
    assert m.abort_threshold() == 23.0
    m.ingest([_started(abort_patience=0)])
    assert m.abort_threshold() is None, "patience 0 means the engine never aborts"


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


def test_crash_without_run_finished_marks_failed_and_interrupted_means_aborted():
    m = RunModel()
    m.ingest(demo_run(20))
    m.set_liveness("crashed")
    assert m.state == "failed" and m.ended
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
    assert m.setting("attn_backend") == "sdpa"  # from RunStarted.config['model']
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
    assert MemoryPanel.gauge_and_numbers(m, 40) == "[$text-muted]cpu: device memory is not measured[/]"
    m.ingest(demo_run(10))
    text = MemoryPanel.gauge_and_numbers(m, 40)
    gauge = text.splitlines()[0]
    assert "[$success]peak 2.06 GiB[/]" in text and "meas/pred [b]0.93[/b]" in text
    assert gauge.startswith("[$success]█████[/]") and gauge.index("┃") > gauge.index("█")
