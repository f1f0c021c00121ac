"""The `lm` task package: causal-LM training and LoRA / LoRA+ fine-tuning (spec.py is the torch-free entry)."""
