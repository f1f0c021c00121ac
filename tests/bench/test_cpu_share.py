"""bench.cpu_share counts the CPU of a whole process tree, and a gone process as nothing."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cpu_share import autogroup, tree_cpu_s

#: Burns 0.3 s of its own CPU, then idles until killed (so it is still in the tree when read).
BURN = "import time\nwhile time.process_time() < 0.3: pass\ntime.sleep(60)"


def test_a_grandchild_burning_cpu_is_counted_for_its_idle_ancestor():
    # sh only waits: without following descendants the tree would read ~0 s
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "$0" & wait', BURN], start_new_session=True)
    try:
        deadline, used = time.monotonic() + 10, 0.0
        while used < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
            used = tree_cpu_s(shell.pid)
        assert used >= 0.25
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(10)


def test_a_gone_process_reads_zero_and_a_live_one_counts_its_own_time():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(10)
    assert tree_cpu_s(done.pid) == 0.0
    before = tree_cpu_s(os.getpid())
    began = time.process_time()
    while time.process_time() - began < 0.1:
        pass
    assert tree_cpu_s(os.getpid()) - before >= 0.05


def test_autogroup_reads_the_kernels_setting():
    path = Path("/proc/sys/kernel/sched_autogroup_enabled")
    setting = path.read_text().strip() if path.exists() else ""
    assert autogroup() == {"1": "on", "0": "off"}.get(setting, "unknown")


def test_a_trace_interpolates_the_cpu_between_its_readings_and_knows_nothing_outside_them():
    from bench.cpu_share import CpuTrace

    trace = CpuTrace(os.getpid())
    trace.samples = [(100.0, 10.0), (100.1, 10.1), (100.2, 10.3)]  # 1 core, then 2
    assert trace.at(100.05) == pytest.approx(10.05) and trace.at(100.2) == 10.3
    assert trace.cores(100.05, 100.15) == pytest.approx(1.5)  # half of each reading interval
    assert math.isnan(trace.at(99.9)) and math.isnan(trace.at(100.3)) and math.isnan(trace.cores(99.0, 100.1))


def test_a_trace_of_a_live_process_reads_what_it_burned_in_between():
    from bench.cpu_share import CpuTrace

    trace = CpuTrace(os.getpid())
    trace.sample()
    began = time.process_time()
    while time.process_time() - began < 0.2:
        pass
    trace.sample()
    (start, _), (end, _) = trace.samples
    assert trace.cores(start, end) * (end - start) >= 0.15  # this process's own 0.2 s, at the kernel's tick resolution


def test_one_process_cpu_seconds_count_its_threads_and_not_its_children():
    from bench.dash_probe import cpu_seconds

    child = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        before = cpu_seconds(os.getpid())
        began = time.process_time()
        while time.process_time() - began < 0.2:
            pass
        mine = cpu_seconds(os.getpid()) - before
        deadline = time.monotonic() + 10
        while cpu_seconds(child.pid) < 0.25:  # the child's burn, read from outside
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert 0.15 <= mine < 0.25 + 0.1  # this process's 0.2 s at the tick's resolution, not the child's 0.3 s
    finally:
        child.kill()
        child.wait(10)
