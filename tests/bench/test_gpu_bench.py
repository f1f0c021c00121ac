"""`python -m bench --gpu` on a machine without a GPU: every row through real probe processes, faked.

tests/bench/fake_gpu_probe.py stands in for bench.gpu_probe (same command line, rows of the same shape,
its arguments echoed), so what runs here is the script's own path: the rows in order, one process each
under the budget, each row printed and appended to the JSON-lines log as it comes, and the page's section
written from the rows kept — also when the run is cut partway.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import __main__ as suite
from bench import gpu, gpu_probe, gpu_section
from bench import page as results_page

pytestmark = pytest.mark.timeout(120)
FAKE = (sys.executable, str(Path(__file__).with_name("fake_gpu_probe.py")))
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_measure_runs_every_row_end_to_end_keeps_each_and_writes_the_page(tmp_path, monkeypatch):
    printed: list[str] = []
    log, page = tmp_path / "BENCHMARKS-gpu.jsonl", tmp_path / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\nMachine: cpu box.\n\n## Start-up\n\nbody\n")
    assert gpu.run("Fake GPU", gpu.Clock(120), log, page, command=FAKE, out=printed.append, facts="box") == 0
    planned = gpu.rows()
    _, kept = gpu.read_log(log)
    assert [(r["group"], r["label"]) for r in kept] == [(r.group, r.label) for r in planned]
    assert not [r for r in kept if "error" in r], [r for r in kept if "error" in r]
    # ordered by value: every memory row first (all four tasks), then OOM, gauges, baselines, speed, ...
    groups = [r["group"] for r in kept]
    assert sorted(groups, key=gpu.GROUPS.index) == groups and list(dict.fromkeys(groups)) == list(gpu.GROUPS)
    assert {"sensorlm", "toy", "lm", "gapfill"} <= {r["args"]["task"] for r in kept if r["group"] == "memory"}
    lm = [r["args"]["overrides"]["lm"]["seq_len"] for r in kept if r["group"] == "memory" and r["args"]["task"] == "lm"]
    assert {512, 1024} <= set(lm)
    # each probe got its own arguments (the precision row once crashed on a clashing `kind` keyword)
    assert [r["args"]["precision"] for r in kept if r["group"] == "precision"] == ["bf16", "fp16"]
    # one line printed per row, as it came
    rows_printed = [line for line in printed if line.startswith("gpu ")]
    assert len(rows_printed) == len(planned) and rows_printed[0].startswith("gpu memory    demo b16 sdpa")
    assert "allocated 100.0 MiB" in rows_printed[0]
    text = page.read_text()
    assert "## GPU: Fake GPU" in text and "## Start-up\n\nbody" in text and "cut" not in text.split("## GPU")[1]
    assert "| lm demo b8 seq512 full | 100 | 104 (+4.0 %)" in text
    assert "GPU engine ÷ DataLoader loop steps/s: 1.1 — goal ≥ 1 met" in text
    assert "GPU tests (pytest -m gpu): 3 passed, 0 failed — met" in text and "not measured" not in text
    # the compile rows: each compiled row's ratio and its memory against the eager prediction, the readback's syncs
    assert "| toy b32 model | 10.0 | 13.0 | **1.300** |" in text
    assert "GPU compiled memory, toy b32 model: predicted ÷ measured peak (never under): 1.08" in text
    assert "host syncs a step (torch.cuda.set_sync_debug_mode) sync 1.00, deferred 0.00" in text
    # the fast steps on the GPU: both tasks' engine ÷ bare, and the bare rate the regime asks for
    assert "GPU fast steps: engine ÷ bare loop steps/s (toy): 0.98 — goal ≥ 0.95 met" in text
    assert "GPU fast steps: bare loop steps/s (tiny LoRA LM): 600 — goal ≥ 1000 MISSED by 400" in text


def test_a_cut_run_has_printed_and_kept_every_row_so_far_and_writes_the_page_from_them(tmp_path):
    log, page, pids = tmp_path / "rows.jsonl", tmp_path / "BENCHMARKS.md", tmp_path / "pids"
    driver = ("import sys; from pathlib import Path; from bench import gpu; "
              "sys.exit(gpu.run('Fake GPU', gpu.Clock(120), Path(sys.argv[1]), Path(sys.argv[2]), "
              "command=tuple(sys.argv[3:]), out=lambda line: print(line, flush=True), facts='box'))")
    proc = subprocess.Popen([sys.executable, "-c", driver, str(log), str(page), *FAKE], cwd=ROOT, text=True,
                            env=_env(FAKE_GPU_HANG="baselines", FAKE_GPU_PIDS=str(pids)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while "baselines" not in (pids.read_text() if pids.exists() else ""):  # one round out, then stuck
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # what `timeout` does to a run over its time
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    before = [r for r in gpu.rows() if r.group in ("memory", "oom", "gauges")]
    printed = [line for line in stdout.splitlines() if line.startswith("gpu ")]
    assert len(printed) == len(before) + 1 and printed[-1].startswith("gpu baselines")
    assert "[cut: cut by Cut]" in printed[-1]
    device, kept = gpu.read_log(log)
    assert device == "Fake GPU" and [r["label"] for r in kept] == [r.label for r in before] + ["fair baselines"]
    assert kept[-1]["engine, defaults"]["quiet"] == [110.0] and kept[-1]["cut"] == "cut by Cut"
    hung = int(next(line for line in pids.read_text().splitlines() if line.startswith("baselines")).split()[1])
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)  # the stuck probe was stopped with the run
    text = page.read_text()
    assert "was **cut**: cut by SIGTERM after" in text and "| demo b16 sdpa | 100 |" in text
    assert "(demo, batch 16, 1 rounds (cut: cut by Cut))" in text
    assert "**Speed** (base, batch 8, bf16): error: not measured: the run ended before this row" in text
    assert "GPU tests: not run (not measured: the run ended before this row)" in text
    # the section can be rebuilt from the log alone (a SIGKILLed run wrote no page)
    page.unlink()
    assert gpu.from_log(log, page, out=lambda line: None, facts="box") == 0
    assert "| demo b16 sdpa | 100 |" in page.read_text() and "rows were kept" in page.read_text()


def test_each_probe_runs_under_what_is_left_of_the_budget_and_keeps_its_rounds_when_cut(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_GPU_HANG", "baselines")
    slow = gpu.Row("baselines", "fair baselines", "baselines", {"rounds": 3}, limit=200, least=0.5)
    clock = gpu.Clock(1.5)  # less than the row's own limit: the budget cuts it
    began = time.monotonic()
    row = gpu.probe(slow, clock, FAKE)
    assert time.monotonic() - began < 1.5 + gpu.GRACE_S
    assert row["cut"].startswith("timed out after") and row["engine, defaults"]["quiet"] == [110.0]
    assert gpu.probe(slow, clock, FAKE) == {"error": "skipped: 0 s of the 2-s budget left"}


def test_gpu_without_cuda_says_so_in_one_line(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert suite.main(["--gpu"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["bench --gpu: no CUDA device here (torch.cuda.is_available() is False); nothing measured"]


def _gpu_results():
    from bench import baselines as b

    mem = {"allocated": 1000 * 2**20, "analytic": 1050 * 2**20, "traced": 1010 * 2**20, "reserved": 1100 * 2**20,
           "engine_predicted": 1150 * 2**20, "nvml_used": 1600 * 2**20, "engine_total": 1650 * 2**20, "context": 500}
    return {"memory": [{"config": "demo b16 sdpa", **mem}, {"config": "base b8 sdpa bf16", "error": "timed out"}],
            "oom": {"batch": 4096, "cap": 2 << 30, "recoveries": 2, "grad_accum": 4, "batch_kept": True, "steps": 3,
                    "status": "finished", "reasons": ["out of memory: micro-batch 4096 -> 2048"]},
            "precision": [{"precision": "bf16", "first": 9.0, "last": 7.5, "skipped": 0, "steps": 60},
                          {"precision": "fp16", "first": 9.0, "last": 9.5, "skipped": 3, "steps": 60}],
            "gauges": {"pairs": [{"nvml": 1000 * 2**20, "reserved": 495 * 2**20, "smi": 1000 * 2**20}],
                       "context": 500 * 2**20},
            "speed": {"steps_per_s": 12.5, "gpu_idle_pct": 7.5, "mfu": 0.31, "tokens": 2512, "params": 134175254,
                      "batch": 8, "device": "NVIDIA H200", "peak_tflops": 989.0},
            "tests": {"passed": 4, "failed": 0, "skipped": 0, "errors": 0, "deselected": 0, "failures": []},
            "baselines": {b.ENGINE: {"quiet": [110.0, 100.0, 105.0], "load": []},
                          b.DATALOADER: {"quiet": [100.0] * 3, "load": []},
                          b.LIGHTNING: {"quiet": [100.0] * 3, "load": []}},
            "slices": {"bare": [100.0] * 5, "viewer": [99.5] * 5},
            "fast": {"bare": [2000.0, 2100.0], "engine": [1900.0, 2050.0], "bare_lm": [900.0] * 2,
                     "engine_lm": [950.0] * 2}}


def test_gpu_section_reads_every_row_and_lands_on_the_page(tmp_path, monkeypatch):
    section = gpu_section.section("NVIDIA H200", _gpu_results(), 400.0)
    assert section.title == "GPU: NVIDIA H200" and "Device: **NVIDIA H200**" in section.body
    text = "\n".join(section.verdicts)
    assert "GPU analytic vs max_memory_allocated, lowest: 5 % — goal ≥ 0 % met" in text
    assert "GPU traced vs max_memory_allocated, worst |error|: 1 % — goal ≤ 3 % met" in text
    assert "| base b8 sdpa bf16 | error: timed out |" in section.body
    assert "recovered, effective batch kept — met" in text
    assert "GPU bf16 steps run and learn: met" in text and "GPU fp16 steps run and learn: MISSED" in text
    assert "GPU gauge: MemorySampled NVML vs nvidia-smi, worst |error|: 0 % — goal ≤ 1 % met" in text
    assert "GPU gauge: allocator reserved + context vs nvidia-smi, worst |error|: 0.5 % — goal ≤ 1 % met" in text
    assert "GPU engine ÷ DataLoader loop steps/s: 1.05 — goal ≥ 1 met" in text
    assert "GPU tests (pytest -m gpu): 4 passed, 0 failed — met" in text
    assert "MFU 31.0 %" in section.body and "GPU idle 7.5 %" in section.body
    assert "toy bare 2050 (2000–2100) steps/s, engine ÷ bare **0.963 (0.950–0.976)**" in section.body
    assert "GPU fast steps: engine ÷ bare loop steps/s (tiny LoRA LM): 1.06 — goal ≥ 0.95 met" in text
    page = results_page.merge_page("# Benchmarks\n\nMachine: cpu box.\n\n## Start-up\n\nbody\n", [section],
                                   "python -m bench --gpu", "h")
    assert "## GPU: NVIDIA H200" in page and "## Start-up\n\nbody" in page


def test_gpu_probe_output_parsing():
    assert gpu.parse_row('warming up\n{"a": 1}\n') == {"a": 1}
    assert gpu.parse_row('{"a": 1}\n{"a": 2, "b"') == {"a": 1}  # the last line cut mid-write by a kill
    assert "error" in gpu.parse_row("Traceback ...\n")
    counts = gpu_probe.parse_pytest("..F\nFAILED tests/engine/budget/test_measure.py::test_x - assert\n"
                                    "1 failed, 2 passed, 300 deselected in 9.1s\n")
    assert (counts["passed"], counts["failed"], counts["deselected"]) == (2, 1, 300)
    assert counts["failures"] == ["tests/engine/budget/test_measure.py::test_x"]
    assert gpu_probe.peak_tflops("NVIDIA H200") == 989.0 and gpu_probe.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_probe.peak_tflops("Some GPU") is None
    assert gpu_probe._plain({"a": [float("nan"), 1.5], 2: (3,)}) == {"a": [None, 1.5], "2": [3]}
    assert len(gpu.MEMORY_ROWS) >= 6 and {"sdpa", "math", "chunked"} <= {
        label.split()[2] for label, task, *_ in gpu.MEMORY_ROWS if task == "sensorlm"}
    assert json.loads(json.dumps(gpu.fold([{"group": "precision", "label": "bf16", "error": "x"}]))) == {
        "precision": [{"precision": "bf16", "error": "x"}]}


def test_every_row_binds_to_its_real_probe_function():
    """The real probe is called as KINDS[kind](**kwargs): each row's arguments must fit that signature."""
    import inspect

    for row in gpu.rows():
        inspect.signature(gpu_probe.KINDS[row.kind]).bind(**row.kwargs)
