"""Building the LM: transformers for the model, peft for the adapters; nothing hand-written.

Order matters and is fixed here:

1. the base model — ``AutoModelForCausalLM.from_pretrained(path,
   local_files_only=True)`` in fp32 (the optimizer's master weights; autocast
   makes the bf16/fp16 compute copies), or ``LlamaForCausalLM(LlamaConfig)``
   with random weights;
2. activation checkpointing through transformers' own
   ``activation_checkpointing_enable`` (``use_reentrant=False``) on the *base*
   model, before peft wraps it. Parameter names stay as they are, so the PEFT
   state dict (and the exported adapter) keeps every target module; wrapping
   the layers with torch's ``checkpoint_wrapper`` after ``get_peft_model``
   instead makes ``get_peft_model_state_dict`` return nothing
   (research/wave2.md);
3. ``get_peft_model(model, LoraConfig(...))`` for LoRA; norms train through
   ``modules_to_save``, so they are saved in, and restored from, the adapter.

The weight-init seed is honoured on every path: random base weights and the
LoRA A matrices (peft's kaiming init) are both drawn inside one
``torch.random.fork_rng`` seeded with ``train.seed``, so the same seed gives
the same model whatever ran before, and the global RNG is left untouched.
(Seeding only one of the two construction paths makes the other path's
weights depend on whatever drew random numbers before it.)
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from engine.tasks.lm.model_dir import read_config
from engine.tasks.lm.spec import LMConfig
from engine.tasks.protocol import TaskError


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def refusal(exc: BaseException) -> str:
    """transformers' error in a few words; its refusal of custom code (a paragraph) as one short reason."""
    if "custom code" in str(exc) and "trust_remote_code" in str(exc):
        return ("it needs the directory's own Python code (auto_map), which this engine never runs: "
                "trust_remote_code=False")
    return _first_line(exc)


def base_model(cfg: LMConfig, seq_len: int) -> nn.Module:
    """The base causal LM (fp32), from lm.model.path or randomly initialised from the lm.model shape."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    m = cfg.model
    if m.path:
        read_config(m.path)  # every file bounded in type, size and depth before transformers opens one
        root = Path(m.path).expanduser()
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # a missing-weights warning becomes our one-line error below
        try:
            # trust_remote_code=False, said explicitly: left unset, transformers asks "Do you wish to run the
            # custom code? [y/N]" on stdin for a directory with its own modeling code; a headless engine
            # never prompts, and never runs a model directory's code.
            model, info = AutoModelForCausalLM.from_pretrained(
                str(root), local_files_only=True, dtype=torch.float32, trust_remote_code=False,
                attn_implementation=m.attn_implementation, output_loading_info=True)
        except Exception as exc:  # corrupt weights, unknown architecture, …: transformers raises many types
            raise TaskError(f"lm.model.path={m.path}: cannot load the model ({refusal(exc)})") from None
        finally:
            hf_logging.set_verbosity(verbosity)
        missing = [k for k in info.get("missing_keys", ()) if "rotary" not in k]
        if missing:
            raise TaskError(f"lm.model.path={m.path}: weights missing for {len(missing)} tensors "
                            f"(first: {sorted(missing)[0]}); the directory is incomplete or corrupt")
    else:
        config = LlamaConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                             intermediate_size=m.intermediate_size, num_hidden_layers=m.layers,
                             num_attention_heads=m.heads, num_key_value_heads=m.kv_heads,
                             max_position_embeddings=max(2048, seq_len), tie_word_embeddings=m.tie_embeddings,
                             attn_implementation=m.attn_implementation)
        model = LlamaForCausalLM(config)
    if m.activation_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def set_activation_checkpointing(base: nn.Module, on: bool) -> None:
    """Turn activation checkpointing of the base model's decoder layers on or off in place (a live setting).

    The same transformers API the build uses, so parameter names (and a PEFT adapter's keys) do not move. Off
    also removes the hook that makes the embedding output require grad (transformers adds it with checkpointing
    for adapter training): the loss and its gradients are the same either way, the hook only costs a little.
    """
    if on:
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.activation_checkpointing_disable()
        base.disable_input_require_grads()


def linear_names(model: nn.Module) -> list[str]:
    """Last name components of the model's Linear layers (what LoRA targets are matched against)."""
    return sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, nn.Linear)})


def norm_names(model: nn.Module) -> list[str]:
    """Last name components of the model's normalisation layers (RMSNorm, LayerNorm)."""
    return sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
                   if name and "norm" in type(mod).__name__.lower()})


def add_lora(model: nn.Module, cfg: LMConfig) -> nn.Module:
    """``get_peft_model`` with the configured LoRA; TaskError naming lm.lora.targets for an unknown module."""
    from peft import LoraConfig, get_peft_model

    lora = cfg.lora
    targets = lora.target_list()
    have = linear_names(model)
    unknown = [t for t in targets if t not in have]
    if unknown:
        raise TaskError(f"lm.lora.targets: {', '.join(unknown)} not in this model; its linear layers: "
                        f"{', '.join(have)} (or attention, mlp, all-linear)")
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        task_type="CAUSAL_LM", bias="none",
                        modules_to_save=norm_names(model) if lora.train_norms else None)
    with _fake_safe_peft(), warnings.catch_warnings():
        # peft 0.21 asks the model `is_gradient_checkpointing`, which transformers 5 deprecates (FutureWarning)
        warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
        return get_peft_model(model, config)


def _traced() -> bool:
    """True under the budget's trace: a FakeTensorMode makes every tensor created a fake one (a subclass), and no
    mode a real run enters does (torch's own question, ``torch._guards.detect_fake_mode``, is private)."""
    return torch.empty(()).__class__ is not torch.Tensor


@contextmanager
def _fake_safe_peft():
    """Under FakeTensorMode (the budget's traced estimate) make ``Module.to`` a no-op while peft wraps the model.

    peft moves each new adapter onto its layer's device and dtype with
    ``.to``, which must swap a fake parameter in place and fails ("Couldn't
    swap Linear.weight"). In a trace the model is built on one device in fp32
    already, so every such move is a no-op anyway; outside a trace nothing
    is patched.
    """
    if not _traced():
        yield
        return
    saved = nn.Module.to
    nn.Module.to = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        nn.Module.to = saved


@contextmanager
def real_mask_path():
    """Under FakeTensorMode (the budget's trace) let transformers build the attention mask the real run builds.

    With no attention mask and no cache, transformers 5 looks for packed
    sequences in the position ids (``find_packed_sequence_indices``) and,
    finding none in the real run (the model's own ids are 0..T-1 in every
    row: this task never passes any), skips the mask and lets sdpa run
    causal with grouped-query heads. A fake tensor has no values to look at,
    so under a trace transformers assumed packing: it built a B×T×T mask and
    repeated k and v to every head, ~1.5 MiB a layer more than the real step
    in the ``bench memory_accuracy`` LM rows (traced +3 to +13 % over the
    truth). The answer the real data always gives, None, is given here
    without looking. Outside a trace nothing is patched.
    """
    if not _traced():
        yield
        return
    from transformers import masking_utils

    saved = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = saved


def build(cfg: LMConfig, seq_len: int, seed: int) -> nn.Module:
    """Base model (+ LoRA), every random draw from ``seed`` (module docstring)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = base_model(cfg, seq_len)
        if cfg.finetune == "lora":
            model = add_lora(model, cfg)
    return model


def run_base(config) -> nn.Module:
    """The base model an adapter of the run ``config`` (its RunConfig, e.g. read back from config.toml) sits on:
    the same first draws as ``build``, under the run's seed, so a random base comes back bit for bit and
    ``PeftModel.from_pretrained(run_base(config), adapter_dir)`` is the trained model again (docs/LM.md)."""
    lm = config.task_config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.train.seed)
        return base_model(lm, lm.seq_len)


def vocab_size(model: nn.Module) -> int:
    """Rows of the input embedding: the largest token id + 1 the model accepts."""
    return int(model.get_input_embeddings().weight.shape[0])
