"""LM tokens/s: the engine against the transformers + peft loop a careful user writes, same model and batches.

    python -m bench --only lm_throughput [--quick]
    python -m bench.lm_throughput loop STEPS      (one loop run; prints a JSON line)

Both variants train LoRA (r 8, all seven projections) on the `demo` preset's
random Llama (hidden 64, 2 layers, byte vocabulary), batch 16 × 128 tokens, on
Python's own sources, one torch thread, each in a process of its own:

* **careful loop**: ``LlamaForCausalLM`` + ``get_peft_model`` built directly,
  a ``torch.utils.data`` Dataset of packed 129-token windows, a
  ``DataLoader(batch_size=16, shuffle=True, num_workers=1)`` building the next
  batches in a worker, AdamW over the trainable parameters, clipping, the
  loss from ``model(input_ids, labels=…)``, ``float(loss)`` every step;
* **engine**: ``sensorlm-tui train --task lm --headless`` with the same
  settings: events.jsonl, console, heartbeat, checkpoints off between evals,
  control server — everything a real run has.

tokens/s between steps ``lo`` and ``hi`` (start-up and the first steps
excluded); rounds interleave the two (A B, B A, …). Goal (LM issue): engine ÷
loop ≥ 0.98.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Section, fmt_stats, ratios, smoke
from bench.run_events import EventsFile, steps_per_s

BATCH, SEQ, RANK = 16, 128, 8
LOOP, ENGINE = "careful transformers + peft loop (DataLoader, 1 worker)", "engine (`train --task lm --headless`)"


def careful_loop(steps: int) -> dict:
    """The user's loop (module docstring); step end times and the last loss."""
    import numpy as np
    import torch
    from peft import LoraConfig, get_peft_model
    from torch.utils.data import DataLoader, Dataset
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.tasks.lm import data as lmdata
    from engine.tasks.lm.spec import PRESETS

    torch.set_num_threads(1)
    torch.manual_seed(0)
    shape = PRESETS["demo"]["lm"]["model"]
    model = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=shape["hidden_size"],
                                         intermediate_size=shape["intermediate_size"],
                                         num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                                         num_key_value_heads=shape["kv_heads"], max_position_embeddings=2048))
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=2 * RANK, task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]))
    docs, _ = lmdata.read_documents(None, "text", 2_000_000)
    stream = np.concatenate([np.append(np.frombuffer(d.encode(), np.uint8), 0) for d in docs]).astype(np.int64)

    class Windows(Dataset):
        def __len__(self) -> int:
            return (len(stream) - 1) // SEQ

        def __getitem__(self, i: int):
            return torch.from_numpy(stream[i * SEQ: i * SEQ + SEQ + 1])

    loader = DataLoader(Windows(), batch_size=BATCH, shuffle=True, num_workers=1, persistent_workers=True,
                        generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    marks, loss_value = [], float("nan")
    model.train()
    for step, tokens in enumerate(loader):
        if step == steps:
            break
        loss = model(input_ids=tokens[:, :-1], labels=tokens[:, :-1].clone(), use_cache=False).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = float(loss.detach())
        marks.append(time.perf_counter())
    return {"marks": marks, "loss": loss_value}


def _loop_rate(steps: int, lo: int, hi: int) -> float:
    out = subprocess.run([sys.executable, "-m", "bench.lm_throughput", "loop", str(steps)], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"careful loop failed: {out.stderr.strip().splitlines()[-1:]}")
    marks = json.loads(out.stdout.strip().splitlines()[-1])["marks"]
    return BATCH * SEQ * (hi - lo) / (marks[hi - 1] - marks[lo - 1])


def _engine_rate(steps: int, lo: int, hi: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "tui.cli", "train", "--task", "lm", "--headless", "--threads", "1",
                        "--max-steps", str(steps), "--eval-every", "0", "--checkpoint-every", "0",
                        "--run-dir", str(run), "--set", "lm.finetune=lora", "--set", f"lm.lora.r={RANK}",
                        "--set", f"lm.lora.alpha={2 * RANK}", "--set", "schedule.kind=constant",
                        "--set", "optimizer.lr=1e-3", "--set", f"train.batch_size={BATCH}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900, check=True)
        log = EventsFile(run / "events.jsonl")
        log.read()
        return BATCH * SEQ * steps_per_s(log.steps, lo, hi)


def run(quick: bool = False) -> Section:
    """Suite entry: interleaved rounds of both variants (full 3 × 60 steps, quick 2 × 30, smoke 1 × 8)."""
    rounds, steps = (1, 8) if smoke() else (2, 30) if quick else (3, 60)
    lo, hi = (2, steps) if smoke() else (10, steps)
    rates: dict[str, list[float]] = {LOOP: [], ENGINE: []}
    for r in range(rounds):
        order = (LOOP, ENGINE) if r % 2 == 0 else (ENGINE, LOOP)
        for name in order:
            rates[name].append((_loop_rate if name == LOOP else _engine_rate)(steps, lo, hi))
    ratio = ratios(rates[ENGINE], rates[LOOP])
    body = "\n".join([
        f"LoRA r {RANK} on every projection of the `demo` Llama (byte vocabulary), batch {BATCH} × {SEQ} tokens, "
        f"1 torch thread, {rounds} interleaved rounds of {steps} steps, tokens/s over steps {lo}–{hi}. "
        "The box is shared: wall-clock rates are noisy, the per-round ratio less so.", "",
        "| variant | tokens/s |", "|---|---:|",
        *(f"| {name} | {fmt_stats(values, '.0f')} |" for name, values in rates.items()),
        f"| **engine ÷ loop** (per round) | **{fmt_stats(ratio, '.3f')}** |",
    ])
    return Section("LM: engine tokens/s vs a careful transformers + peft loop",
                   f"python -m bench --only lm_throughput{' --quick' if quick else ''}", body)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "loop":
        print(json.dumps(careful_loop(int(sys.argv[2]))))
    else:
        print(run(quick="--quick" in sys.argv).body)
