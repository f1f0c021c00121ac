"""Named presets per task: nested dicts of config overrides, applied before the TOML file and flags.

Torch-free, so ``sensorlm-tui plan`` and config validation never import torch.
The SensorLM numbers are sized so that ``demo`` learns visibly in minutes on
two CPU cores and ``base`` is the seed's ViT-B-scale encoder at 2448 tokens.
"""

from __future__ import annotations

#: task name → preset name → overrides (sections as in engine.config.RunConfig).
PRESETS: dict[str, dict[str, dict]] = {
    "sensorlm": {
        # ~0.6M params, 24 tokens (one per hour, each spanning all 32 channels): learns visibly in 300 steps
        # on 2 CPU cores. Hour-by-all-channel patches and lr 5e-4 are what made retrieval learn that fast:
        # with 60x4 patches (192 tokens, a shared patch projection across channel groups) or lr 2e-3 it
        # stayed at chance for 300 steps (measurements in engine/tasks/sensorlm/model.py).
        "demo": {
            "model": {"dim": 64, "depth": 2, "heads": 4, "patch_time": 60, "patch_channels": 32,
                      "text_dim": 64, "text_depth": 1, "decoder_depth": 1, "text_heads": 4, "embed_dim": 64,
                      "max_caption_tokens": 48, "vocab_size": 512},
            "data": {"channels": 32, "val_samples": 64},
            "train": {"batch_size": 16, "lr": 5e-4, "max_steps": 300, "eval_every": 50},
        },
        # ~11M params, 768 tokens (48 x 16).
        "tiny": {
            "model": {"dim": 256, "depth": 8, "heads": 4, "patch_time": 30, "patch_channels": 2,
                      "text_dim": 256, "text_depth": 2, "decoder_depth": 2, "text_heads": 4, "embed_dim": 256,
                      "max_caption_tokens": 64},
            "data": {"channels": 32},
            "train": {"batch_size": 16, "lr": 1e-3, "max_steps": 2000, "eval_every": 200},
        },
        # ~43M params, 1152 tokens (72 x 16).
        "small": {
            "model": {"dim": 512, "depth": 8, "heads": 8, "patch_time": 20, "patch_channels": 2,
                      "text_dim": 512, "text_depth": 2, "decoder_depth": 2, "text_heads": 8, "embed_dim": 512,
                      "max_caption_tokens": 64},
            "data": {"channels": 32},
            "train": {"batch_size": 32, "lr": 5e-4, "max_steps": 20000, "eval_every": 500},
        },
        # ViT-B sensor encoder (85M) at the seed's 1440 x 34 input in 10 x 2 patches = 2448 tokens; ~134M in all.
        "base": {
            "model": {"dim": 768, "depth": 12, "heads": 12, "patch_time": 10, "patch_channels": 2,
                      "text_dim": 512, "text_depth": 6, "decoder_depth": 6, "text_heads": 8, "embed_dim": 768,
                      "max_caption_tokens": 64},
            "data": {"channels": 34},
            "train": {"batch_size": 8, "lr": 3e-4, "max_steps": 100000, "eval_every": 1000,
                      "precision": "bf16"},
        },
    },
    # The engine's own tiny task: masked-signal reconstruction with an MLP (engine/tasks/toy.py).
    "toy": {
        "demo": {
            "model": {"dim": 128, "depth": 2},
            "data": {"channels": 8, "minutes": 128, "val_samples": 64},
            "train": {"batch_size": 32, "lr": 3e-3, "max_steps": 300, "eval_every": 50},
        },
    },
}
