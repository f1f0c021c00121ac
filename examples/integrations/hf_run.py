"""A transformers.Trainer run in the cockpit: a tiny random Llama (from a config, no download) on CPU.

    python examples/integrations/hf_run.py RUN_DIR [--steps N] [--step-s S] [--resume]

then ``sensorlm-tui attach RUN_DIR`` from any terminal. The Trainer's own checkpoints go to
RUN_DIR/hf (``checkpoint-N``). ``--step-s`` sleeps in each step so there is time to press keys.
``--resume`` continues from the newest of them (``trainer.train(resume_from_checkpoint=True)``).
The tests drive this script.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from sensorlm_tui.hf import CockpitCallback


class Slow(TrainerCallback):
    """Sleeps after each step: a toy model this small trains faster than anyone can press a key."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def tokens(n: int, length: int, seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, 64, (n, length), generator=generator) % 16  # a small alphabet: something to learn
    return [{"input_ids": row, "labels": row.clone()} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint-N")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))
    data = tokens(512, 16, 0)
    training = TrainingArguments(output_dir=f"{args.run_dir}/hf", max_steps=args.steps, per_device_train_batch_size=8,
                                 learning_rate=3e-3, logging_steps=1, eval_strategy="steps", eval_steps=20,
                                 save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                                 dataloader_num_workers=0)
    example = {"input_ids": torch.stack([r["input_ids"] for r in data[:8]]),
               "labels": torch.stack([r["labels"] for r in data[:8]])}
    callbacks = [CockpitCallback(args.run_dir, example_batch=example)] + ([Slow(args.step_s)] if args.step_s else [])
    Trainer(model=model, args=training, train_dataset=data, eval_dataset=tokens(64, 16, 1),
            callbacks=callbacks).train(resume_from_checkpoint=args.resume or None)


if __name__ == "__main__":
    main()
