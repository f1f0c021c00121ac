"""``python -m engine.app.rank_worker [train flags]``: one rank of a torchrun job (started by ``supervise``).

Every rank validates the flags and opens the same checkpoint (nothing is
written yet), then all agree that every rank could; only then does rank 0
create the run directory. Rank 0 runs the engine exactly as one process does
(events, status, control socket, checkpoints) with the run's strategy (DDP,
or FSDP2 for ``runtime.strategy = "fsdp2"``) and agreed controls; the others
train the same steps with no sinks and, under DDP, no checkpoint directory
(under FSDP2 they write their checkpoint shards there), their output only in their torchrun log
(``RUN_DIR/ranks/``). Rank 0 broadcasts the config it settled on (after the
memory guard), so every rank trains the same batch. A restart by torchrun (``--max-restarts``) resumes the run
from its newest complete checkpoint instead of starting it again.
"""

from __future__ import annotations

import os
import sys


def follow(prepared, parallel) -> int:
    """A rank other than 0: train in step with rank 0, writing nothing in the run directory."""
    from engine.app import signals
    from engine.app.prepare import settle_resumed_batch
    from engine.core import config as cfg
    from engine.distributed.controls import AgreedControls
    from engine.run.sinks import EventBus
    from engine.training.loop import Trainer

    # As JSON: a task's config class is built at run time and does not pickle.
    settled = parallel.broadcast(None)
    if settled.get("refused"):  # rank 0's memory guard (or the task) refused the job and said why
        return 0
    config = cfg.validate(settled, "rank 0's config")
    if prepared.resume is not None:
        settle_resumed_batch(prepared.resume, config)
    controls = AgreedControls(parallel)
    # FSDP2: every rank writes its shard of each checkpoint into the (shared) run directory; DDP: none.
    checkpoint_dir = prepared.run_dir.checkpoints if parallel.writes_shards else None
    trainer = Trainer(config, EventBus(), controls, checkpoint_dir=checkpoint_dir, resume=prepared.resume,
                      name=prepared.run_dir.name, run_dir=prepared.run_dir.root, parallel=parallel)
    trainer.setup()
    controls.bind(lambda: trainer.step, lambda event: None)  # its telemetry goes to rank 0 in the gather
    signals.install(controls, config.policies.on_hangup, prepared.run_dir.root / "ranks" / f"rank-{parallel.rank}.log",
                    note=lambda text: print(text, flush=True))
    return trainer.run().exit_code


def main(argv: list[str]) -> int:
    """Run this rank; its exit code."""
    from engine.app.main import build_parser, run_prepared
    from engine.app.prepare import UsageError, prepare
    from engine.core.exit_codes import ExitCode
    from engine.distributed.controls import AgreedControls
    from engine.distributed.fsdp import Fsdp2
    from engine.distributed.parallel import CollectiveTimeout, Ddp, env_world
    from engine.optim import device as dev

    args, _ = build_parser().parse_known_args(argv[1:] if argv[:1] == ["train"] else argv)  # view flags are not ours
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restarted and args.run_dir and not args.resume:
        # --max-restarts: torchrun starts every rank again with the same flags; the run directory already
        # holds this run, so the restart continues it from its newest complete checkpoint.
        args.resume, args.run_dir, args.config = args.run_dir, None, None
    rank, _, local_rank = env_world()
    error = None
    try:
        prepared = prepare(args)
    except UsageError as exc:
        error = str(exc)
    device = "cpu"
    if error is None:
        device = dev.resolve(prepared.config.runtime.device).type
        if device == "cuda":
            import torch

            torch.cuda.set_device(local_rank)  # one GPU per rank on this node
    timeout_s = prepared.config.runtime.collective_timeout_s if error is None else 300.0
    if error is None and prepared.config.runtime.strategy == "fsdp2":
        parallel = Fsdp2(device, prepared.config.runtime.precision, timeout_s)
    else:  # also when the flags were refused: the group only agrees on that, then closes
        parallel = Ddp(device, timeout_s)
    if parallel.agree(error is not None):  # also the barrier before rank 0 creates the run directory
        if rank == 0:
            sys.stderr.write(f"sensorlm-tui: error: {error or 'another rank refused the flags'}\n")
        parallel.close()  # left open, gloo's threads abort the interpreter at exit (SIGABRT, not 2)
        return 2
    try:
        if rank == 0:
            code = run_prepared(prepared, parallel=parallel, controls=AgreedControls(parallel))
        else:
            code = follow(prepared, parallel)
    except UsageError as exc:
        sys.stderr.write(f"sensorlm-tui: error: {exc}\n")
        parallel.close()  # as above: a clean exit 2, not gloo's abort
        return 2
    except CollectiveTimeout as exc:  # a rank other than 0 waited past the timeout (rank 0 returns HUNG itself)
        sys.stderr.write(f"sensorlm-tui: rank {rank}: {exc}\n")
        code = ExitCode.HUNG
    if code == ExitCode.HUNG or rank != 0:
        # Leave without tearing the group down (the cost: Python's exit handlers are skipped). After a hang,
        # leaving would wait on the hung peer. A follower owns nothing in the run directory, and rank 0's
        # process hosts the job's TCP store: a follower still leaving the group when rank 0 has gone finds
        # the store closed and gloo's threads abort the interpreter (SIGABRT, exit -6: seen on two nodes,
        # where the ranks finish apart).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    parallel.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
