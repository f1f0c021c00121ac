"""The `lm` demo in a real terminal: the perplexity chart, tokens/s with MFU "–" on a CPU, and a sequence
length the memory budget cannot fit refused in the tune modal with its reason. Then a graceful abort.

A small budget (``--vram-gb``) that the demo fits at its 128 tokens but not at 8192 (the B×T×V logits
alone grow 64×) makes the refusal certain without a large model.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
import pytest

from engine.run.rundir import RunDir, pid_alive
from tests.e2e.tmux import Tmux, needs_tmux, sensorlm

pytestmark = [needs_tmux, pytest.mark.e2e, pytest.mark.slow]

#: GiB: the demo's predicted peak fits, a 8192-token sequence does not.
BUDGET_GB = "0.25"


def _step(text: str) -> int:
    found = re.search(r"step (\d+)/(\d+)", text)
    return int(found.group(1)) if found else -1


def _type_sequence_length(tmux: Tmux, value: str) -> None:
    """Open the tune modal, tab to its sequence-length field (after batch size, grad accum and learning rate)
    and type ``value`` over what it holds."""
    tmux.keys("lm", "t")
    tmux.wait_for("lm", lambda s: "Tune the running job" in s and "seq length 8..1048576" in s, 20, "the tune modal")
    # The first field takes focus once the modal is mounted, and a tab before that is lost; focus has no sign in
    # the pane's text, so this is a settling time rather than a wait on something the test can see.
    time.sleep(1.0)
    for keys in (["Tab"] * 3, ["Home", "C-k"], list(value)):  # apart: sent in one burst, the digits missed the field
        tmux.keys("lm", *keys)
        time.sleep(0.5)
    tmux.wait_for("lm", lambda s: re.search(rf"seq length 8\.\.1048576\s+{value}\b", s), 10, "the typed seq length")


def test_lm_demo_perplexity_mfu_and_a_refused_sequence_length(tmp_path: Path, tmux: Tmux) -> None:
    run = tmp_path / "runs" / "lm"
    tmux.start("lm", sensorlm("train", "--task", "lm", "--threads", "1", "--max-steps", "100000",
                              "--eval-every", "20", "--set", "lm.val_samples=4", "--set", "lm.corpus_bytes=200000",
                              "--vram-gb", BUDGET_GB, "--run-dir", str(run)))
    try:
        text = tmux.wait_for("lm", lambda s: _step(s) >= 2 and "MFU" in s, 120, "training steps with tokens/s")
        assert re.search(r"\d+ tokens/s · MFU –", text), "tokens/s, and MFU '–' on a CPU (no peak known)"
        assert "perplexity" in text, "the task's primary metric is charted"

        _type_sequence_length(tmux, "8192")
        tmux.wait_for("lm", lambda s: "seq_len → 8192: won't fit" in s, 30, "the engine's prediction for 8192 tokens")
        tmux.keys("lm", "Enter")
        refused = tmux.wait_for("lm", lambda s: "seq_len → 8192: refused" in s, 30, "the refusal")
        assert re.search(r"predicted peak [\d.]+ GiB > budget [\d.]+ MiB", refused), refused
        events = (run / "events.jsonl").read_text()
        assert '"type":"refused"' in events and '"name":"seq_len"' in events
        assert '"name":"seq_len"' not in "".join(line for line in events.splitlines() if '"type":"setting"' in line)

        tmux.keys("lm", "Escape")
        tmux.wait_for("lm", lambda s: "Tune the running job" not in s, 20, "the tune modal closed")
        tmux.keys("lm", "a")
        tmux.wait_for("lm", lambda s: "graceful" in s, 20, "the abort modal")
        tmux.keys("lm", "g")
        assert "EXIT=0" in tmux.wait_for("lm", lambda s: "EXIT=" in s, 60, "the app to exit after the abort")
    finally:  # the engine runs in its own session: a failed check must not leave it training
        pid = (RunDir(run).read_status() or {}).get("pid")
        if pid and pid_alive(pid):
            psutil.Process(pid).kill()
