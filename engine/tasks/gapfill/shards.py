"""The shard format and its manifest, and every check a bad data directory fails with one line.

A data directory holds ``manifest.json`` and one safetensors file per day and
instrument, ``<instrument>_<YYYY-MM-DD>.safetensors`` (no pickle anywhere):

=========  ===============  ====================================================
tensor     dtype, shape     meaning
=========  ===============  ====================================================
frames     f32 (T,B,H,W)    recorded frames, asinh-coded (``physics.encode``)
hours      f64 (T,)         frame times, hours since the data set's epoch
valid      u8  (T,)         1 = observed; 0 = missing (its frame is zeros)
gain       f32 (T,B)        per-frame, per-band gain: recorded = gain·radiance + offset
offset     f32 (T,B)        per-frame, per-band offset
=========  ===============  ====================================================

Shard metadata (safetensors string map): ``format``, ``instrument``, ``day``,
``bands`` (comma-separated, must equal the manifest's order), ``radius_px``.

``manifest.json``: ``format``, ``bands``, ``height``, ``width``,
``cadence_minutes``, ``instruments`` (name → ``{"radius_px": r}``),
``splits`` (split → list of days), ``shards`` (file name → ``{"bytes", "sha256"}``)
and ``digest`` (sha256 over the sorted shard digests), which checkpoints and
the run log quote so a result can be traced to its data.

Splits are by day, so no frame of a validation day ever trains; a day listed
in two splits is refused. Loading reads every shard once (checking size,
digest, bands, shape and finiteness), so a damaged file is a one-line error at
start-up naming it, never a NaN at step 10,000.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.core.safe_files import read_json, read_regular
from engine.tasks.gapfill import physics
from engine.tasks.protocol import TaskError

#: Largest manifest read: ~150 bytes a shard, so 64 MiB is ~400,000 instrument-days.
MAX_MANIFEST_BYTES = 64 << 20
#: Longest cadence: a shard holds one day, so a frame at least once a day.
MINUTES_PER_DAY = 1440
#: Largest image side (a full-disk solar image is 4096 pixels).
MAX_IMAGE_SIDE = 8192
#: Largest |coded| frame value: radiance ASINH_SCALE·sinh(4·ASINH_RANGE) ≈ 1e14. Real frames code into about
#: [0, 1]; near ±4.9 the square of the decoded radiance already overflows float32 (a loss of inf).
MAX_CODE = 4.0

SHARD_FORMAT = "gapfill-shard/1"
MANIFEST_FORMAT = "gapfill-manifest/1"
MANIFEST = "manifest.json"


def shard_name(instrument: str, day: str) -> str:
    """File name of one day of one instrument."""
    return f"{instrument}_{day}.safetensors"


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(shards: dict) -> str:
    """The data set's digest: sha256 over the sorted (name, file digest) pairs."""
    text = "\n".join(f"{name} {info['sha256']}" for name, info in sorted(shards.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def check_splits(splits: dict, where: str) -> None:
    """TaskError naming the first day found in two splits (``where``: the manifest's path)."""
    seen: dict[str, str] = {}
    for split in sorted(splits):
        for day in splits[split]:
            if day in seen and seen[day] != split:
                raise TaskError(f"{where}: day {day} is in both splits {seen[day]!r} and {split!r}; "
                                "a day belongs to one split")
            seen[day] = split


@dataclass
class Timeline:
    """Every frame of one instrument in one split, in time order (days concatenated)."""

    instrument: str
    radius: float
    hours: np.ndarray   # (N,) float64
    valid: np.ndarray   # (N,) bool
    frames: np.ndarray  # (N, B, H, W) float32, coded
    gain: np.ndarray    # (N, B) float32
    offset: np.ndarray  # (N, B) float32


@dataclass
class DataSet:
    """An opened, checked data directory: its manifest facts and one timeline per (split, instrument)."""

    directory: Path
    digest: str
    bands: tuple[str, ...]
    height: int
    width: int
    cadence_minutes: float
    timelines: dict[str, list[Timeline]]  # split -> one per instrument


def _read_manifest(directory: Path) -> tuple[dict, Path]:
    path = directory / MANIFEST
    try:
        manifest = read_json(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        from engine.core.invocation import command

        raise TaskError(f"{path}: manifest not found (make one with "
                        f"`{command('data', 'gapfill', '--out', directory)}`)") from None
    except OSError as exc:
        raise TaskError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise TaskError(f"{path}: not a readable JSON manifest ({str(exc)[:120]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise TaskError(f"{path}: format is not {MANIFEST_FORMAT!r}")
    try:
        for key, kind in (("bands", list), ("height", int), ("width", int), ("cadence_minutes", (int, float)),
                          ("instruments", dict), ("splits", dict), ("shards", dict), ("digest", str)):
            if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool):
                raise TypeError(key)
    except (KeyError, TypeError) as exc:
        raise TaskError(f"{path}: field {exc.args[0]!r} is missing or of the wrong type") from None
    problem = _manifest_problem(manifest)
    if problem:
        raise TaskError(f"{path}: {problem}")
    return manifest, path


def _manifest_problem(manifest: dict) -> str | None:
    """The first value in a well-typed manifest that no data set can have (None when all are plausible)."""
    cadence = manifest["cadence_minutes"]
    if not (math.isfinite(cadence) and 0 < cadence <= MINUTES_PER_DAY):
        return f"cadence_minutes={cadence!r}: must be a number of minutes in (0, {MINUTES_PER_DAY}] (a shard is a day)"
    for key in ("height", "width"):
        if not 1 <= manifest[key] <= MAX_IMAGE_SIDE:
            return f"{key}={manifest[key]}: must be 1..{MAX_IMAGE_SIDE} pixels"
    bands = manifest["bands"]
    if not bands or not all(isinstance(b, str) and b for b in bands) or len(set(bands)) != len(bands):
        return f"bands={str(bands)[:80]}: must be a non-empty list of distinct band names"
    instruments = manifest["instruments"]
    if not instruments or not all(isinstance(v, dict) for v in instruments.values()):
        return "instruments: must name at least one instrument, each with its {\"radius_px\": r}"
    for split, days in manifest["splits"].items():
        if not isinstance(days, list) or not all(isinstance(d, str) for d in days):
            return f"splits.{split}: must be a list of days (YYYY-MM-DD)"
    for name, entry in manifest["shards"].items():
        if not (isinstance(entry, dict) and type(entry.get("bytes")) is int and entry["bytes"] >= 0
                and isinstance(entry.get("sha256"), str)):
            return f"shards.{name}: must be {{\"bytes\": size, \"sha256\": hex digest}}"
    return None


def _read_shard(path: Path, listed: dict, manifest: dict, instrument: str) -> dict[str, np.ndarray] | dict:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        raw = read_regular(path, listed["bytes"])
    except FileNotFoundError:
        raise TaskError(f"{path}: shard missing (listed in {MANIFEST})") from None
    except OSError as exc:
        size = path.stat().st_size if exc.errno == errno.EFBIG else None
        raise TaskError(f"{path}: truncated or changed: {size} bytes, {MANIFEST} says {listed['bytes']}"
                        if size is not None else f"{path}: cannot read ({exc.strerror})") from None
    if len(raw) != listed["bytes"]:
        raise TaskError(f"{path}: truncated or changed: {len(raw)} bytes, {MANIFEST} says {listed['bytes']}")
    if hashlib.sha256(raw).hexdigest() != listed.get("sha256"):
        raise TaskError(f"{path}: sha256 differs from {MANIFEST} (the file changed after the manifest was written)")
    try:
        tensors = load(raw)
        meta = _metadata(raw)
    except (SafetensorError, ValueError, json.JSONDecodeError) as exc:
        raise TaskError(f"{path}: not a readable safetensors shard ({str(exc)[:120]})") from None
    if meta.get("format") != SHARD_FORMAT:
        raise TaskError(f"{path}: format is not {SHARD_FORMAT!r}")
    bands = meta.get("bands", "").split(",")
    if bands != list(manifest["bands"]):
        raise TaskError(f"{path}: bands {','.join(bands)} out of order; expected {','.join(manifest['bands'])}")
    if meta.get("instrument") != instrument:
        raise TaskError(f"{path}: instrument {meta.get('instrument')!r}, expected {instrument!r}")
    frames = tensors.get("frames")
    if frames is None or frames.ndim != 4 or frames.dtype != np.float32:
        raise TaskError(f"{path}: 'frames' must be float32 (T, bands, H, W)")
    T = frames.shape[0]
    if frames.shape[1] != len(bands):
        raise TaskError(f"{path}: frames hold {frames.shape[1]} bands; the manifest lists {len(bands)}")
    if frames.shape[2:] != (manifest["height"], manifest["width"]):
        raise TaskError(f"{path}: frames are {frames.shape[2]}×{frames.shape[3]} pixels; {MANIFEST} says "
                        f"{manifest['height']}×{manifest['width']}")
    for key, shape in (("hours", (T,)), ("valid", (T,)), ("gain", (T, len(bands))), ("offset", (T, len(bands)))):
        if key not in tensors or tensors[key].shape != shape:
            raise TaskError(f"{path}: tensor {key!r} missing or not of shape {shape}")
    for key in ("frames", "hours", "gain", "offset"):
        bad = ~np.isfinite(tensors[key].reshape(T, -1)).all(axis=1)
        if bad.any():
            raise TaskError(f"{path}: {key} of frame {int(np.argmax(bad))} has non-finite values (NaN or inf)")
    if (tensors["gain"] <= 0).any():
        raise TaskError(f"{path}: gains must be > 0")
    extreme = np.abs(tensors["frames"].reshape(T, -1)).max(axis=1, initial=0.0) > MAX_CODE
    if extreme.any():
        raise TaskError(f"{path}: frames of frame {int(np.argmax(extreme))} are coded beyond ±{MAX_CODE:g} "
                        f"(radiance {physics.decode(MAX_CODE, math):.1e}); real frames code into about [0, 1]")
    if T > 1 and not (np.diff(tensors["hours"]) > 0).all():
        raise TaskError(f"{path}: frame times must increase")
    return tensors


def _metadata(raw: bytes) -> dict:
    """The safetensors header's __metadata__ map (the numpy loader does not return it)."""
    length = int.from_bytes(raw[:8], "little")
    if length <= 0 or length > len(raw) - 8:
        raise ValueError("header length out of range")
    return json.loads(raw[8: 8 + length]).get("__metadata__") or {}


def open_dataset(directory: str | Path, splits: tuple[str, ...] = ("train", "val")) -> DataSet:
    """Read and check a data directory; TaskError with one line naming the bad file otherwise."""
    directory = Path(directory)
    manifest, where = _read_manifest(directory)
    check_splits(manifest["splits"], str(where))
    instruments = manifest["instruments"]
    timelines: dict[str, list[Timeline]] = {}
    for split in splits:
        days = manifest["splits"].get(split)
        if not days:
            raise TaskError(f"{where}: split {split!r} lists no days")
        timelines[split] = []
        for instrument in sorted(instruments):
            parts = []
            for day in sorted(days):
                name = shard_name(instrument, day)
                if name not in manifest["shards"]:
                    raise TaskError(f"{where}: day {day} of {instrument} has no entry in 'shards'")
                parts.append(_read_shard(directory / name, manifest["shards"][name], manifest, instrument))
            radius = float(instruments[instrument].get("radius_px", 0))
            if not 0 < radius <= max(manifest["height"], manifest["width"]):
                raise TaskError(f"{where}: instruments.{instrument}.radius_px={radius}: must be in (0, image size]")
            cat = {k: np.concatenate([p[k] for p in parts]) for k in ("hours", "valid", "frames", "gain", "offset")}
            if len(cat["hours"]) > 1 and not (np.diff(cat["hours"]) > 0).all():
                raise TaskError(f"{where}: days of {instrument} in split {split!r} overlap in time")
            timelines[split].append(Timeline(instrument, radius, cat["hours"].astype(np.float64),
                                             cat["valid"].astype(bool), cat["frames"], cat["gain"],
                                             cat["offset"]))
    return DataSet(directory, manifest["digest"], tuple(manifest["bands"]), manifest["height"], manifest["width"],
                   float(manifest["cadence_minutes"]), timelines)


def write_shard(path: Path, instrument: str, day: str, bands, radius: float, frames: np.ndarray,
                hours: np.ndarray, valid: np.ndarray, gain: np.ndarray, offset: np.ndarray) -> dict:
    """Write one shard; returns its manifest entry (bytes, sha256)."""
    from safetensors.numpy import save_file

    save_file({"frames": np.ascontiguousarray(frames, np.float32), "hours": np.asarray(hours, np.float64),
               "valid": np.asarray(valid, np.uint8), "gain": np.asarray(gain, np.float32),
               "offset": np.asarray(offset, np.float32)}, str(path),
              metadata={"format": SHARD_FORMAT, "instrument": instrument, "day": day, "bands": ",".join(bands),
                        "radius_px": repr(float(radius))})
    return {"bytes": path.stat().st_size, "sha256": file_digest(path)}


def write_manifest(directory: Path, bands, height: int, width: int, cadence_minutes: float, instruments: dict,
                   splits: dict, shards: dict) -> dict:
    """Write manifest.json (refusing overlapping splits) and return it."""
    check_splits(splits, str(directory / MANIFEST))
    manifest = {"format": MANIFEST_FORMAT, "bands": list(bands), "height": height, "width": width,
                "cadence_minutes": cadence_minutes, "instruments": instruments, "splits": splits,
                "shards": shards, "digest": manifest_digest(shards)}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
