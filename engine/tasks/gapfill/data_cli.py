"""`sensorlm-tui data gapfill`: write the synthetic data set (shards + manifest), or check a data directory.

Torch-free. Writing never touches an existing non-empty directory (nothing on
disk is damaged: the shards go to a temporary sibling and are renamed into
place at the end). ``--check DIR`` opens a directory the way training does and
reports its first problem in one line, exit 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from engine.core.exit_codes import ExitCode
from engine.tasks.gapfill.spec import SyntheticConfig
from engine.tasks.protocol import TaskError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `data gapfill` (defaults: the demo's data set)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", metavar="DIR", help="write shards and manifest.json here (must be new or empty)")
    group.add_argument("--check", metavar="DIR", help="check a data directory as training would, and say what is wrong")
    for name, info in SyntheticConfig.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(info.default), default=info.default,
                            help=f"{info.description} (default {info.default})")


def main(args: argparse.Namespace) -> int:
    """Run the command; one-line error and exit 2 on bad input."""
    from pydantic import ValidationError

    from engine.tasks.gapfill import shards, synth

    try:
        if args.check:
            data = shards.open_dataset(args.check)
            frames = {split: sum(len(t.hours) for t in tls) for split, tls in data.timelines.items()}
            print(f"{args.check}: ok, digest {data.digest[:12]}, {data.height}×{data.width}, "
                  + ", ".join(f"{split} {n} frames" for split, n in frames.items()))
            return 0
        params = SyntheticConfig(**{name: getattr(args, name) for name in SyntheticConfig.model_fields})
        out = Path(args.out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise TaskError(f"--out {out}: exists and is not an empty directory (nothing was written)")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            manifest = synth.generate(tmp, **params.model_dump())
            if out.exists():
                out.rmdir()
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        sys.stderr.write(f"sensorlm-tui: error: --{'-'.join(map(str, error['loc'])).replace('_', '-')}: "
                         f"{error['msg']}\n")
        return ExitCode.BAD_INPUT
    except (TaskError, OSError) as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        return ExitCode.BAD_INPUT
    print(f"{out}: {len(manifest['shards'])} shards, digest {manifest['digest'][:12]}, splits "
          + ", ".join(f"{k} {len(v)} days" for k, v in manifest["splits"].items()))
    return 0
