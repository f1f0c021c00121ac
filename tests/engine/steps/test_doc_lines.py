"""docs/STEP_RECORD.md's lines into pandas, polars and DuckDB, run exactly as the page writes them."""

from __future__ import annotations

import re

import numpy as np

from engine.run import events as ev
from engine.run.steps import StepWriter, record_dir
from tests.conftest import ROOT


def _blocks() -> list[str]:
    text = (ROOT / "docs" / "STEP_RECORD.md").read_text(encoding="utf-8")
    section = text.split("## Your tools read it", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_documented_lines_load_a_run_into_pandas_polars_and_duckdb(tmp_path, monkeypatch):
    writer = StepWriter(record_dir(tmp_path / "runs" / "my-run"))
    for step in range(1, 301):
        writer.append_event(ev.StepLogged(step=step, loss=1.0 / step, lr=1e-3, components={"mse": 2.0 / step}))
    writer.close()
    monkeypatch.chdir(tmp_path)
    pandas_block, polars_block, duckdb_block = _blocks()
    scope: dict = {}
    exec(pandas_block, scope)  # noqa: S102 - the documentation's own code
    df = scope["df"]
    assert len(df) == 300 and df["step"].tolist() == list(range(1, 301))
    assert df["loss"].iloc[3] == np.float32(0.25) and df["components.mse"].iloc[1] == 1.0
    exec(polars_block, scope)  # noqa: S102
    assert scope["frame"].shape == df.shape and scope["frame"]["lr"][0] == np.float32(1e-3)
    exec(duckdb_block.replace("duckdb.sql(", "answer = duckdb.sql("), scope)  # noqa: S102 - keep its result
    assert scope["answer"] == [(np.float32(1.0 / 101), 101)]
