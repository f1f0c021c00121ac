"""Which format the step record is kept in: `python -m bench.step_record_formats [--steps 10M,100M]`.

The same rows (the default StepLogged metrics of the toy task: step, t, epoch, loss, lr, grad_norm,
samples_per_s, steps_per_s, batch_size, skipped, tokens_per_s, mfu, components.mse, each in the type the
record chose for it) are written in each candidate format, and for each it measures:

- **append**: seconds per step as the engine appends (a batch of 200 rows every drain) and one row at a time
  (a writer without a drainer, at 1,000 steps/s), each batch on disk (in the page cache) before the next;
- **window**: a random 1,000-step window of ``loss`` read from a fresh open, median of 30;
- **summary**: one level (~2,000 blocks) of a min / max / last summary of the 11 metrics, stored in the same
  format (this record: its pyramid; the others: a table of n/64 rows, what a pyramid from 128-row blocks is);
- **bytes/step** on disk, data and summary together;
- **import** of the reading library in a fresh interpreter (best of 5), and its **installed size**;
- **crash**: a writer SIGKILLed while appending: what a reader opens afterwards;
- **one line** into pandas / polars / duckdb: run, not assumed.

The formats: this record (engine.run.steps: plain arrays, mapped); Arrow IPC stream (one record batch per
append) and file (footer at close) through pyarrow; Parquet (a part file per append: a footer is written only
when a file closes, so that is what an appendable Parquet needs; the stored size and reads are of 1M-row parts,
as a compaction would leave them); sqlite (stdlib; WAL, a commit per append) and duckdb (a commit per append).

Numbers from a shared box move with its load (printed beside them); the ratios between formats are the point.
``BENCH_SMOKE=1`` runs 20,000 steps; ``--formats`` picks some.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT, Section, smoke
from engine.run.steps import StepWriter, open_record
from engine.run.steps.fields import FIELD_DTYPES
from engine.run.steps.layout import BASE, total_blocks

METRICS = [name for name in FIELD_DTYPES]  # t, epoch, …: the 11 fields; the 12th value column is the component
COLUMNS = {"step": "<i8", **FIELD_DTYPES, "components.mse": "<f4"}
BATCH = 200
PART_ROWS = 1 << 20


def rows(first: int, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` rows from step ``first``, shaped like bench.open_run.write_run's."""
    step = np.arange(first, first + n, dtype=np.int64)
    loss = 0.25 * np.exp(-step / 1e7) + rng.random(n) * 1e-3
    out = {"step": step, "t": 1.7e9 + step * 0.01, "epoch": step // 10_000, "loss": loss,
           "lr": 1e-3 * np.minimum(1.0, step / 1000), "grad_norm": rng.random(n), "samples_per_s": 3000 + rng.random(n),
           "steps_per_s": 100 + rng.random(n), "batch_size": np.full(n, 32), "skipped": np.zeros(n),
           "tokens_per_s": np.zeros(n), "mfu": np.zeros(n), "components.mse": loss}
    return {name: values.astype(COLUMNS[name]) for name, values in out.items()}


def summary_rows(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A summary table's rows for another format (their values do not matter, their size and layout do)."""
    blocks = total_blocks(n)
    out = {"level": np.zeros(blocks, np.int8), "block": np.arange(blocks, dtype=np.int64)}
    levels = range(BASE, BASE + 40)  # the levels of this record's pyramid (engine.run.steps.layout)
    out["level"] = np.repeat(np.arange(BASE, BASE + 40), [n >> k for k in levels]).astype(np.int8)
    out["block"] = np.concatenate([np.arange(n >> k) for k in levels if n >> k] or [np.zeros(0, np.int64)])
    for name in [*METRICS, "components.mse"]:
        for stat in ("min", "max", "last"):
            out[f"{name}.{stat}"] = rng.random(blocks).astype(np.float32)
        out[f"{name}.nan"] = np.zeros(blocks, np.uint8)
    return out


# ---------------------------------------------------------------- the formats

class Steps:
    """This record (engine.run.steps)."""

    name = "this record (arrays + pyramid)"
    needs: tuple[str, ...] = ()  # the libraries it writes and reads with, beyond numpy
    imports = "import numpy, engine.run.steps"
    installed = ["numpy", "numpy.libs"]
    one_liners = {"pandas": "pd.DataFrame(read_steps(path))", "polars": "pl.DataFrame(read_steps(path))",
                  "duckdb": None}

    def __init__(self, path: Path) -> None:
        self.path = path

    def appender(self):
        writer = StepWriter(self.path)
        return lambda batch: writer.append_columns(batch["step"], {k: v for k, v in batch.items() if k != "step"}), \
            writer.close

    def finish_bulk(self, n: int, rng) -> None:
        pass  # the writer kept the pyramid as it went

    def window(self, lo: int, hi: int) -> np.ndarray:
        return open_record(self.path).window("loss", lo, hi)[1]

    def summary(self, level: int) -> int:
        record = open_record(self.path)
        return sum(len(record.summary(name, level).min) for name in [*METRICS, "components.mse"])

    def rows_after_crash(self) -> int:
        return open_record(self.path).rows


class ArrowStream:
    name = "Arrow IPC stream"
    footer = False  # the stream format: no footer, batches read in order
    needs = ("pyarrow",)
    imports = "import pyarrow, pyarrow.ipc"
    installed = ["pyarrow", "pyarrow.libs"]
    one_liners = {"pandas": "pa.ipc.open_stream(path / 'steps.arrows').read_pandas()",
                  "polars": "pl.read_ipc_stream(path / 'steps.arrows')", "duckdb": None}

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path / "steps.arrows"

    def _schema(self):
        import pyarrow as pa

        if not hasattr(self, "schema"):
            self.schema = pa.schema([(name, pa.from_numpy_dtype(np.dtype(t))) for name, t in COLUMNS.items()])
        return self.schema

    def appender(self):
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self.path.mkdir(parents=True, exist_ok=True)
        sink = pa.OSFile(str(self.file), "wb")
        writer = (ipc.new_file if self.footer else ipc.new_stream)(sink, self._schema())

        def append(batch):
            writer.write_batch(pa.RecordBatch.from_pydict(batch, schema=self._schema()))
        return append, lambda: (writer.close(), sink.close())

    def finish_bulk(self, n: int, rng) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        table = pa.table(summary_rows(n, rng))
        with ipc.new_file(str(self.path / "summary.arrow"), table.schema) as out:
            out.write_table(table)

    def window(self, lo: int, hi: int) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        out = [np.zeros(0, np.float32)]
        with pa.memory_map(str(self.file)) as source:  # no index: every batch before the window is walked
            for batch in ipc.open_stream(source):
                steps = batch.column(0).to_numpy()
                if steps[-1] >= lo:
                    if steps[0] > hi:
                        break
                    out.append(batch.column(3).to_numpy()[(steps >= lo) & (steps <= hi)])
        return np.concatenate(out)

    def summary(self, level: int) -> int:
        return _arrow_level(self.path / "summary.arrow", level)

    def rows_after_crash(self) -> int:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        n = 0
        with pa.memory_map(str(self.file)) as source:
            reader = ipc.open_stream(source)
            while True:
                try:
                    n += reader.read_next_batch().num_rows
                except StopIteration:
                    return n
                except (pa.ArrowInvalid, OSError):  # a torn last batch: the batches before it are whole
                    return n


class ArrowFile(ArrowStream):
    name = "Arrow IPC file"
    footer = True  # batches found through the footer, written at close
    one_liners = {"pandas": "pd.read_feather(path / 'steps.arrow')", "polars": "pl.read_ipc(path / 'steps.arrow')",
                  "duckdb": None}

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.file = path / "steps.arrow"

    def window(self, lo: int, hi: int) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        with pa.memory_map(str(self.file)) as source:
            reader = ipc.open_file(source)
            batches = reader.num_record_batches
            first, last = 0, batches - 1  # batches hold consecutive steps: binary search on their first step
            while first < last:
                mid = (first + last + 1) // 2
                if reader.get_batch(mid).column(0)[0].as_py() <= lo:
                    first = mid
                else:
                    last = mid - 1
            out = []
            for i in range(first, batches):
                batch = reader.get_batch(i)
                steps = batch.column(0).to_numpy()
                out.append(batch.column(3).to_numpy()[(steps >= lo) & (steps <= hi)])
                if steps[-1] >= hi:
                    break
            return np.concatenate(out)

    def rows_after_crash(self) -> int:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        with pa.memory_map(str(self.file)) as source:
            return sum(ipc.open_file(source).get_batch(i).num_rows for i in range(1))  # raises without a footer


class ParquetParts:
    name = "Parquet (a part file per append)"
    needs = ("pyarrow",)
    imports = "import pyarrow, pyarrow.parquet"
    installed = ["pyarrow", "pyarrow.libs"]
    one_liners = {"pandas": "pd.read_parquet(path)", "polars": "pl.read_parquet(path / '*.parquet')",
                  "duckdb": "duckdb.sql(f\"SELECT * FROM '{path}/*.parquet'\").df()"}

    def __init__(self, path: Path) -> None:
        self.path = path
        self.parts = 0

    def appender(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path.mkdir(parents=True, exist_ok=True)

        def append(batch):
            pq.write_table(pa.table(batch), self.path / f"part-{self.parts:09d}.parquet")
            self.parts += 1
        return append, lambda: None

    def finish_bulk(self, n: int, rng) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(summary_rows(n, rng)), self.path.parent / f"{self.path.name}-summary.parquet")

    def window(self, lo: int, hi: int) -> np.ndarray:
        import pyarrow.parquet as pq

        part = self.path / f"part-{(lo - 1) // PART_ROWS:09d}.parquet"  # parts of PART_ROWS steps, in order
        table = pq.read_table(part, columns=["loss"], filters=[("step", ">=", lo), ("step", "<=", hi)])
        return table.column(0).to_numpy()

    def summary(self, level: int) -> int:
        import pyarrow.parquet as pq

        table = pq.read_table(self.path.parent / f"{self.path.name}-summary.parquet", filters=[("level", "=", level)])
        return table.num_rows * 12

    def rows_after_crash(self) -> int:
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(self.path.glob("*.parquet")))


class Sqlite:
    name = "sqlite (WAL)"
    needs = ("sqlite3",)
    imports = "import sqlite3"
    installed = ["{dynload}/_sqlite3*", "/usr/lib/x86_64-linux-gnu/libsqlite3.so.*"]
    one_liners = {"pandas": "pd.read_sql('SELECT * FROM steps', sqlite3.connect(path / 'steps.db'))",
                  "polars": "pl.read_database('SELECT * FROM steps', sqlite3.connect(path / 'steps.db'))",
                  "duckdb": None}

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self):
        import sqlite3

        self.path.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path / "steps.db")
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        return con

    def appender(self):
        con = self._connect()
        names = [f'"{n}"' for n in COLUMNS]
        types = ["INTEGER PRIMARY KEY"] + ["REAL" if t[-2] == "f" else "INTEGER" for t in list(COLUMNS.values())[1:]]
        con.execute(f"CREATE TABLE IF NOT EXISTS steps ({', '.join(f'{n} {t}' for n, t in zip(names, types))})")
        insert = f"INSERT OR REPLACE INTO steps VALUES ({', '.join('?' * len(names))})"

        def append(batch):
            con.executemany(insert, zip(*(v.tolist() for v in batch.values())))
            con.commit()
        return append, con.close

    def finish_bulk(self, n: int, rng) -> None:
        con = self._connect()
        table = summary_rows(n, rng)
        columns = ", ".join(f'"{k}"' for k in table)
        con.execute(f"CREATE TABLE summary ({columns}, PRIMARY KEY (level, block))")
        con.executemany(f"INSERT INTO summary VALUES ({', '.join('?' * len(table))})",
                        zip(*(v.tolist() for v in table.values())))
        con.commit()
        con.close()

    def window(self, lo: int, hi: int) -> np.ndarray:
        import sqlite3

        with sqlite3.connect(self.path / "steps.db") as con:
            return np.array(con.execute("SELECT loss FROM steps WHERE step BETWEEN ? AND ?", (lo, hi)).fetchall())

    def summary(self, level: int) -> int:
        import sqlite3

        with sqlite3.connect(self.path / "steps.db") as con:
            return len(con.execute("SELECT * FROM summary WHERE level = ?", (level,)).fetchall()) * 12

    def rows_after_crash(self) -> int:
        import sqlite3

        with sqlite3.connect(self.path / "steps.db") as con:
            return con.execute("SELECT count(*) FROM steps").fetchone()[0]


class DuckDB:
    name = "duckdb"
    needs = ("duckdb", "pyarrow")
    imports = "import duckdb"
    installed = ["duckdb", "_duckdb*"]
    one_liners = {"pandas": "duckdb.connect(str(path / 'steps.duckdb')).sql('FROM steps').df()",
                  "polars": "duckdb.connect(str(path / 'steps.duckdb')).sql('FROM steps').pl()",
                  "duckdb": "duckdb.connect(str(path / 'steps.duckdb')).sql('FROM steps').fetchall()"}

    def __init__(self, path: Path) -> None:
        self.path = path

    def appender(self):
        import duckdb
        import pyarrow as pa

        self.path.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(self.path / "steps.duckdb"))
        types = {"<i8": "BIGINT", "<f8": "DOUBLE", "<f4": "FLOAT", "<i4": "INTEGER", "u1": "UTINYINT"}
        columns = ", ".join(f'"{n}" {types[t]}' for n, t in COLUMNS.items())
        con.execute(f"CREATE TABLE IF NOT EXISTS steps ({columns})")

        def append(batch):
            arrow_batch = pa.table(batch)  # noqa: F841 - read by name in the statement
            con.execute("INSERT INTO steps SELECT * FROM arrow_batch")
        return append, con.close

    def finish_bulk(self, n: int, rng) -> None:
        import duckdb
        import pyarrow as pa

        arrow_summary = pa.table(summary_rows(n, rng))  # noqa: F841 - read by name in the statement
        with duckdb.connect(str(self.path / "steps.duckdb")) as con:
            con.execute("CREATE TABLE summary AS SELECT * FROM arrow_summary")

    def window(self, lo: int, hi: int) -> np.ndarray:
        import duckdb

        with duckdb.connect(str(self.path / "steps.duckdb"), read_only=True) as con:
            return con.execute("SELECT loss FROM steps WHERE step BETWEEN ? AND ?", [lo, hi]).fetchnumpy()["loss"]

    def summary(self, level: int) -> int:
        import duckdb

        with duckdb.connect(str(self.path / "steps.duckdb"), read_only=True) as con:
            return len(con.execute("SELECT * FROM summary WHERE level = ?", [level]).fetchall()) * 12

    def rows_after_crash(self) -> int:
        import duckdb

        with duckdb.connect(str(self.path / "steps.duckdb")) as con:
            return con.execute("SELECT count(*) FROM steps").fetchone()[0]


def _arrow_level(path: Path, level: int) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc

    with pa.memory_map(str(path)) as source:
        table = ipc.open_file(source).read_all()  # mapped: only the level column is read to filter
        return table.filter(pc.equal(table["level"], level)).num_rows * 12


FORMATS = {"steps": Steps, "arrow-stream": ArrowStream, "arrow-file": ArrowFile, "parquet": ParquetParts,
           "sqlite": Sqlite, "duckdb": DuckDB}


# ---------------------------------------------------------------- measuring

def _median(values: list[float]) -> float:
    return float(np.median(values))


def append_cost(kind: str, root: Path, batch: int, total: int, seed: int) -> float:
    """Seconds per step appending ``total`` rows ``batch`` at a time to a fresh store."""
    path = root / f"append-{kind}-{batch}"
    data = rows(1, total, np.random.default_rng(seed))
    append, close = FORMATS[kind](path).appender()
    start = time.perf_counter()
    for lo in range(0, total, batch):
        append({name: values[lo:lo + batch] for name, values in data.items()})
    seconds = time.perf_counter() - start
    close()
    shutil.rmtree(path, ignore_errors=True)
    return seconds / total


def bulk(kind: str, path: Path, n: int, seed: int = 0) -> float:
    """Write ``n`` rows the way the format would hold them after a run (seconds); the summary beside them."""
    rng = np.random.default_rng(seed)
    fmt = FORMATS[kind](path)
    append, close = fmt.appender()
    chunk = BATCH if kind.startswith("arrow") else PART_ROWS  # Arrow: one batch per drain, as appended
    start = time.perf_counter()
    for lo in range(0, n, PART_ROWS):
        data = rows(lo + 1, min(PART_ROWS, n - lo), rng)
        for at in range(0, len(data["step"]), chunk):
            append({name: values[at:at + chunk] for name, values in data.items()})
    close()
    fmt.finish_bulk(n, rng)
    return time.perf_counter() - start


def disk_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (and a sibling summary file named after it)."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
    files += list(path.parent.glob(f"{path.name}-summary*"))
    return sum(p.stat().st_size for p in files)


def warm(path: Path) -> None:
    """Read every file of a store once, so the timings are of files in the page cache (as a viewer's are after
    its first look), not of the disk."""
    for file in [p for p in path.rglob("*") if p.is_file()] + list(path.parent.glob(f"{path.name}-summary*")):
        with open(file, "rb") as handle:
            while handle.read(16 << 20):
                pass


def window_cost(kind: str, path: Path, n: int, trials: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    fmt = FORMATS[kind](path)
    times = []
    for _ in range(trials):
        lo = int(rng.integers(1, max(2, n - 1000)))
        start = time.perf_counter()
        got = fmt.window(lo, lo + 999)
        times.append(time.perf_counter() - start)
        assert len(got) == min(1000, n - lo + 1) or kind == "parquet", (kind, lo, len(got))
    return _median(times)


def summary_cost(kind: str, path: Path, n: int, trials: int) -> tuple[float, int]:
    level = max(BASE, int(np.log2(max(n, 2))) - 11)
    fmt = FORMATS[kind](path)
    times, got = [], 0
    for _ in range(trials):
        start = time.perf_counter()
        got = fmt.summary(level)
        times.append(time.perf_counter() - start)
    return _median(times), got


def import_seconds(statement: str, repeat: int = 5) -> float:
    """Best seconds to run ``statement`` (its imports) in a fresh interpreter, less an empty one's."""
    code = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    best = min(float(subprocess.run([sys.executable, "-c", code.format(statement)], capture_output=True, text=True,
                                    env=env, check=True).stdout) for _ in range(repeat))
    return best


def installed_bytes(patterns: list[str]) -> int:
    """Bytes of the files a format's library installs (site-packages names, or absolute paths)."""
    import sysconfig

    site = Path(np.__file__).parents[1]
    dynload = Path(sysconfig.get_paths()["platstdlib"]) / "lib-dynload"
    total = 0
    for pattern in patterns:
        pattern = pattern.format(dynload=dynload)
        base = Path(pattern) if pattern.startswith("/") else site / pattern
        for path in base.parent.glob(base.name):
            files = path.rglob("*") if path.is_dir() else [path]
            total += sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())
    return total


def crash_child(kind: str, path: Path) -> None:
    """Append 200-row batches until killed (``--crash-child``)."""
    rng = np.random.default_rng(1)
    append, _ = FORMATS[kind](path).appender()
    first = 1
    while True:
        append(rows(first, BATCH, rng))
        if first == 1:
            print("ready", flush=True)  # (after the first append: a library's own set-up is not the crash)
        first += BATCH


def crash(kind: str, root: Path, seconds: float = 1.0) -> str:
    """What a reader finds after the writer was SIGKILLed ``seconds`` into appending."""
    path = root / f"crash-{kind}"
    child = subprocess.Popen([sys.executable, "-m", "bench.step_record_formats", "--crash-child", kind, str(path)],
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    child.stdout.readline()
    time.sleep(seconds)
    child.send_signal(signal.SIGKILL)
    child.wait()
    try:
        found = f"{FORMATS[kind](path).rows_after_crash():,} rows"
    except Exception as exc:  # what the format's reader says about the file
        found = f"unreadable ({type(exc).__name__})"
    pandas = one_liner(kind, path, "pandas")
    shutil.rmtree(path, ignore_errors=True)
    return f"{found}; pandas line: {pandas}"


#: The names the documented lines use, and the modules they are.
LINE_MODULES = {"pd": "pandas", "pl": "polars", "pa": "pyarrow", "duckdb": "duckdb", "sqlite3": "sqlite3"}


def one_liner(kind: str, path: Path, library: str) -> str:
    """Run the format's documented line for ``library`` on the store at ``path`` (importing only what it names)."""
    line = FORMATS[kind].one_liners.get(library)
    if line is None:
        return "no"
    from engine.run.steps import read_steps

    scope = {"read_steps": read_steps, "path": path}
    try:
        for alias, module in LINE_MODULES.items():
            if re.search(rf"\b{alias}\.", line):
                scope[alias] = importlib.import_module(module)
        if "pa.ipc" in line:
            importlib.import_module("pyarrow.ipc")
    except ImportError as exc:
        return f"not installed ({exc.name})"
    try:
        got = eval(line, scope)  # noqa: S307 - the bench's own lines
    except Exception as exc:
        return f"raises {type(exc).__name__}"
    return f"yes ({len(got):,} rows)"


def float32_losses() -> list[str]:
    """What storing each field in float32 would lose, on the values a run gives it (a markdown table)."""
    step = np.arange(1, 100_000_001, 997, dtype=np.int64)
    cases = {
        "step (to 100M)": step.astype(np.float64),
        "t (epoch seconds over 100 days)": 1.7e9 + np.linspace(0, 100 * 86_400, step.size),
        "t − run start (100 days)": np.linspace(0, 100 * 86_400, step.size),
        "lr (cosine from 3e-4)": 3e-4 * 0.5 * (1 + np.cos(np.linspace(0, np.pi, step.size))) + 1e-12,
        "loss (0.01–10)": np.geomspace(0.01, 10, step.size),
        "samples_per_s (1–1e6)": np.geomspace(1, 1e6, step.size),
        "tokens seen (to 1e12)": np.geomspace(1, 1e12, step.size).round(),
    }
    lines = ["| field | largest error in float32 | relative |", "|---|---:|---:|"]
    for name, values in cases.items():
        error = np.abs(values.astype(np.float32).astype(np.float64) - values)
        relative = (error / np.maximum(np.abs(values), 1e-300)).max()
        lines.append(f"| {name} | {error.max():.3g} | {relative:.2g} |")
    return lines


def available(kinds: list[str]) -> tuple[list[str], list[str]]:
    """(the formats whose libraries this environment has, the others): pyarrow is no dependency of the project."""
    have = [k for k in kinds if all(importlib.util.find_spec(lib) is not None for lib in FORMATS[k].needs)]
    return have, [k for k in kinds if k not in have]


def _load_now() -> str:
    return "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.step_record_formats", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10M,100M", help="record sizes, e.g. 10M,100M")
    parser.add_argument("--formats", default=",".join(FORMATS), help=f"some of {','.join(FORMATS)}")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--part", choices=("all", "costs", "sizes"), default="all",
                        help="costs: append, import, install, crash, one-liners; sizes: the per-size table")
    parser.add_argument("--crash-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.crash_child:
        crash_child(args.crash_child[0], Path(args.crash_child[1]))
        return 0
    unknown = [k for k in args.formats.split(",") if k not in FORMATS]
    if unknown:
        parser.error(f"--formats: {','.join(unknown)} unknown; allowed: {','.join(FORMATS)}")
    sizes = [20_000] if smoke() else [int(float(s.rstrip("M")) * 1e6) for s in args.steps.split(",")]
    plan = Plan(args.formats.split(","), sizes if args.part in ("all", "sizes") else [],
                costs=args.part in ("all", "costs"))
    print("\n".join(measure(plan, args.dir)))
    return 0


class Plan:
    """What one run measures: the formats, the record sizes, whether the size-free costs, and how many of each."""

    def __init__(self, kinds: list[str], sizes: list[int], costs: bool = True, tiny: bool | None = None) -> None:
        self.kinds, self.sizes, self.costs = kinds, sizes, costs
        tiny = smoke() if tiny is None else tiny
        self.rounds = 1 if tiny else 3  # interleaved rounds of the append costs
        self.appends = (1_000, 100) if tiny else (100_000, 2_000)  # rows appended in batches, and one at a time
        self.imports = 1 if tiny else 5  # fresh interpreters a format's import is timed in (the best)
        self.trials = 5 if tiny else 30  # windows read (the summary: a sixth of that, at least 3)
        self.crash_s = 0.2 if tiny else 1.0  # seconds a writer appends before its SIGKILL
        self.crashed = ("steps",) if tiny else tuple(FORMATS)  # the formats whose writer is killed (a process each)
        self.line_rows = 2_000 if tiny else 20_000  # rows of the store the one-liners read


def measure(plan: Plan, directory: Path | None = None) -> list[str]:
    """The markdown of a run of ``plan`` (its tables, the load beside each), written under a temp directory."""
    kinds, missing = available(plan.kinds)
    lines = [f"Load average {_load_now()} (1 / 5 / 15 min) at the start."]
    if missing:
        lines.append(f"Left out (their library is not installed here): {', '.join(FORMATS[k].name for k in missing)}.")
    lines += ["", "What storing each field in float32 would lose:", "", *float32_losses()]
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        root = Path(tmp)
        if plan.costs:
            lines += ["", *report_static(kinds, root, plan)]
        for n in plan.sizes:
            lines += ["", *report_size(kinds, root, n, plan)]
    return [*lines, "", f"Load average {_load_now()} at the end."]


def run(quick: bool = False) -> Section:
    """Suite entry: every installed format at 10M steps (``--quick``: 1M; smoke: 20,000 steps of this record and
    sqlite, the two that need no library beyond numpy and the standard one)."""
    if smoke():
        plan = Plan(["steps", "sqlite"], [20_000])
    else:
        plan = Plan(list(FORMATS), [1_000_000 if quick else 10_000_000])
    body = "\n".join(measure(plan)).strip()
    return Section("Step record formats: the candidates docs/STEP_RECORD.md chose between",
                   "python -m bench --only step_record_formats" + (" --quick" if quick else ""), body)


def report_static(kinds: list[str], root: Path, plan: Plan) -> list[str]:
    """Append costs, imports, install size, crash, one-liners: independent of the record's size."""
    batched, single = plan.appends
    for kind in kinds:  # first calls into each library (lazy set-up) are not what an append costs
        append_cost(kind, root, BATCH, 2 * BATCH, 0)
    costs: dict[str, list[float]] = {k: [] for k in kinds}
    ones: dict[str, list[float]] = {k: [] for k in kinds}
    for round_index in range(plan.rounds):  # interleaved rounds: drift on a shared box cancels
        for kind in kinds if round_index % 2 == 0 else kinds[::-1]:
            costs[kind].append(append_cost(kind, root, BATCH, batched, round_index))
            ones[kind].append(append_cost(kind, root, 1, single, round_index))
    lines = [f"Costs that do not depend on the run's length (median of {plan.rounds} interleaved rounds; "
             f"`import numpy` alone {import_seconds('import numpy', plan.imports):.3f} s):", "",
             "| format | append µs/step, 200-row batches | append µs/step, one row at a time | import s | "
             "installed MiB | after a SIGKILL mid-append | pandas | polars | duckdb |",
             "|---|---:|---:|---:|---:|---|---|---|---|"]
    for kind in kinds:
        fmt = FORMATS[kind]
        path = root / f"lines-{kind}"
        bulk(kind, path, plan.line_rows)
        one = [one_liner(kind, path, lib) for lib in ("pandas", "polars", "duckdb")]
        shutil.rmtree(path, ignore_errors=True)
        lines.append(f"| {fmt.name} | {_median(costs[kind]) * 1e6:.2f} | {_median(ones[kind]) * 1e6:.1f} | "
                     f"{import_seconds(fmt.imports, plan.imports):.3f} | "
                     f"{installed_bytes(fmt.installed) / 2**20:.0f} | "
                     f"{crash(kind, root, plan.crash_s) if kind in plan.crashed else 'not tried in this run'} | "
                     f"{' | '.join(one)} |")
    return lines


def report_size(kinds: list[str], root: Path, n: int, plan: Plan) -> list[str]:
    """Write ``n`` steps in each format; bytes a step, window and summary reads."""
    lines = [f"{n:,} steps (load average {_load_now()} before them):", "",
             "| format | write s | bytes/step (data + summary) | window of 1k steps, ms | summary level, ms (values) |",
             "|---|---:|---:|---:|---:|"]
    for kind in kinds:
        path = root / f"{kind}-{n}"
        seconds = bulk(kind, path, n)
        size = disk_bytes(path)
        warm(path)
        window = window_cost(kind, path, n, plan.trials, 3)
        summary, values = summary_cost(kind, path, n, max(3, plan.trials // 6))
        lines.append(f"| {FORMATS[kind].name} | {seconds:.1f} | {size / n:.1f} | {window * 1e3:.2f} | "
                     f"{summary * 1e3:.2f} ({values:,}) |")
        shutil.rmtree(path, ignore_errors=True)
        for sibling in root.glob(f"{path.name}-summary*"):
            sibling.unlink()
    return lines


if __name__ == "__main__":
    sys.exit(main())
