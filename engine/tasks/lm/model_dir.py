"""A Hugging Face model directory, checked before transformers (or the memory model) reads a byte of it.

transformers opens whatever the directory holds: a ``config.json`` that is
``/dev/zero`` filled memory (``MemoryError``), a FIFO hung the run until it
was killed, and a tokenizer file nested deeply enough overflows its JSON
decoder. So every entry at the top of the directory must be a regular file
or a directory (after following links: the Hub's cache links into blobs),
and every JSON file transformers reads is bounded in size and nesting depth
(engine.core.safe_files) first. Weights are only type-checked: their size is
the model's, and safetensors reads them without unpickling anything.

Torch-free: the memory model reads ``config.json`` through ``read_config``
to plan a run before anything is built.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engine.core import safe_files
from engine.tasks.protocol import TaskError

#: JSON files transformers reads from a model directory (config, generation, tokenizer).
JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "added_tokens.json", "vocab.json", "chat_template.json",
              "model.safetensors.index.json")
#: Largest config.json (a real one is a few KiB; one with a long label map a few MiB).
MAX_CONFIG_BYTES = 16 << 20
#: Largest other JSON file (a 256k-token tokenizer.json is ~35 MiB).
MAX_JSON_BYTES = 512 << 20
#: config.json fields the Llama-shaped memory model reads, all positive integers.
SHAPE_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "vocab_size")


def _kind(mode: int) -> str:
    return "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
        else "a socket" if stat.S_ISSOCK(mode) else "a special file"


def check_model_dir(path: str) -> Path:
    """The directory, or TaskError naming lm.model.path and the first entry no loader may open."""
    root = Path(path).expanduser()
    where = f"lm.model.path={path}"
    if not root.is_dir():
        raise TaskError(f"{where}: no such directory")
    if not (root / "config.json").exists():
        raise TaskError(f"{where}: no config.json (not a Hugging Face model directory)")
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise TaskError(f"{where}: cannot list the directory ({exc.strerror})") from None
    for name in names:
        try:
            mode = os.stat(root / name).st_mode
        except OSError as exc:
            raise TaskError(f"{where}: {name}: cannot be opened ({exc.strerror})") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise TaskError(f"{where}: {name} is {_kind(mode)}, not a regular file; a model directory holds files")
    for name in JSON_FILES:
        if name in names and name != "config.json":
            _bounded_json(root, name, MAX_JSON_BYTES, where)
    return root


def _bounded_json(root: Path, name: str, limit: int, where: str):
    try:
        raw = safe_files.read_regular(root / name, limit)
        depth = safe_files.json_depth(raw)
        if depth > safe_files.MAX_JSON_DEPTH:
            raise safe_files.DeepJSON(f"nested {depth} levels deep; at most {safe_files.MAX_JSON_DEPTH} allowed")
        return raw
    except OSError as exc:
        raise TaskError(f"{where}: {name}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise TaskError(f"{where}: {name} is not valid JSON ({str(exc).splitlines()[0][:160]})") from None


def read_config(path: str) -> dict:
    """The directory's config.json as a dict, after ``check_model_dir``; TaskError naming the problem otherwise."""
    import json

    root = check_model_dir(path)
    where = f"lm.model.path={path}"
    raw = _bounded_json(root, "config.json", MAX_CONFIG_BYTES, where)
    try:
        config = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise TaskError(f"{where}: config.json is not valid JSON ({str(exc).splitlines()[0][:160]})") from None
    if not isinstance(config, dict):
        raise TaskError(f"{where}: config.json holds a {type(config).__name__}, not a JSON object")
    return config


def shape_fields(path: str, config: dict) -> dict[str, int]:
    """The Llama-shaped dimensions of ``config`` (SHAPE_FIELDS, plus num_key_value_heads), each checked."""
    out = {}
    for name in (*SHAPE_FIELDS, "num_key_value_heads"):
        value = config.get(name)
        if value is None and name == "num_key_value_heads":
            value = out["num_attention_heads"]
        if type(value) is not int or value < 1:
            custom = ("; its auto_map names custom code, which this engine never runs (trust_remote_code=False)"
                      if "auto_map" in config else "")
            raise TaskError(f"lm.model.path={path}: config.json {name}={str(value)[:40]}: expected a positive "
                            f"integer (a Llama-shaped causal LM){custom}")
        out[name] = value
    return out
