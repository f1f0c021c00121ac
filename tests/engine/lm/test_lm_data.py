"""The LM's corpus reading and packed token stream (no transformers import: fast)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.tasks.lm import data as lmdata
from engine.tasks.lm.task import LMTask
from engine.tasks.protocol import TaskError
from tests.engine.lm.conftest import corpus_text, make_config


def _task(path, **lm):
    task = LMTask(make_config(path, **lm))
    task.setup()
    return task


def test_text_file_dir_and_jsonl_give_the_same_documents(tmp_path) -> None:
    a, b = corpus_text(1, 800), corpus_text(2, 800)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.txt").write_text(a)
    (tmp_path / "dir" / "b.md").write_text(b)
    (tmp_path / "dir" / ".hidden").write_bytes(b"\x00\x01 never read")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps({"id": i, "body": t}) for i, t in enumerate((a, b))) + "\n")
    from_dir = _task(tmp_path / "dir")
    from_jsonl = _task(jsonl, text_field="body")
    assert from_dir.stream.digest == from_jsonl.stream.digest
    # Byte tokens with a 0 after each document: the stream is exactly the two texts.
    whole = np.concatenate([from_dir.stream.train, from_dir.stream.val])
    assert bytes(whole.astype(np.uint8)) == a.encode() + b"\0" + b.encode() + b"\0"


def test_windows_are_packed_and_pure(corpus_file) -> None:
    task = _task(corpus_file)
    T = task.seq_len
    batch = task.make_batch([3, 0, 3], step=7, train=True)["tokens"]
    assert batch.shape == (3, T + 1)
    assert batch[0].tolist() == batch[2].tolist() == task.stream.train[3 * T: 4 * T + 1].tolist()
    # Next window starts where this one's inputs end: nothing skipped, nothing padded.
    assert task.make_batch([4], 0, True)["tokens"][0, 0] == batch[0, T]
    assert task.train_size() == (len(task.stream.train) - 1) // T
    val = task.val_indices()
    assert len(val) == 8 and val == sorted(set(val)) and val[-1] < task.stream.val_windows()


def test_seq_len_setting_recuts_the_same_stream(corpus_file) -> None:
    task = _task(corpus_file)
    before = task.stream.digest
    old_count = task.train_size()
    task.apply_setting(None, "seq_len", 16)
    assert task.make_batch([2], 0, True)["tokens"].shape == (1, 17)
    task.apply_setting(None, "seq_len", 64)  # fewer windows: an index drawn for the old count still builds
    assert task.train_size() < old_count
    assert task.make_batch([old_count - 1], 0, True)["tokens"].shape == (1, 65)
    assert task.stream.digest == before
    with pytest.raises(TaskError, match="no live setting"):
        task.apply_setting(None, "attn_chunk", 8)


def test_resume_onto_another_corpus_is_refused(corpus_file, tmp_path) -> None:
    state = _task(corpus_file).state_dict()
    other = tmp_path / "other.txt"
    other.write_text(corpus_text(9))
    task = LMTask(make_config(other))
    with pytest.raises(TaskError, match="corpus differs"):
        task.setup(state)


@pytest.mark.parametrize("name, content, expected", [
    ("empty.txt", b"  \n\n", "corpus is empty"),
    ("binary.txt", b"ELF\x00\x01\x02" * 100, "binary file"),
    ("latin1.txt", "caf\u00e9\n".encode("latin-1") * 50, "latin1.txt:1: not UTF-8"),
    ("bad.jsonl", b'{"text": "ok"}\n{"text": \n', "bad.jsonl:2: invalid JSON"),
    ("nofield.jsonl", b'{"body": "x"}\n', "nofield.jsonl:1: no string field 'text'"),
    ("short.txt", b"too short\n", "too few for one training and one validation window"),
])
def test_bad_corpus_is_one_line_naming_the_file(tmp_path, name, content, expected) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TaskError) as err:
        _task(path)
    message = str(err.value)
    assert expected in message and "\n" not in message and message.startswith("data.path: ")
    assert path.read_bytes() == content  # nothing on disk changes


def test_missing_path_and_stdlib_demo_corpus(tmp_path) -> None:
    with pytest.raises(TaskError, match="no such file or directory"):
        _task(tmp_path / "nope.txt")
    docs, where = lmdata.read_documents(None, "text", 50_000)
    assert where == "python stdlib sources" and sum(map(len, docs)) >= 50_000


def test_byte_tokenizer_larger_than_the_vocabulary_is_refused(corpus_file) -> None:
    with pytest.raises(TaskError,
                       match=r"lm.model.vocab_size: the tokenizer has 256 tokens but the model's vocabulary is 100"):
        _task(corpus_file, model={"vocab_size": 100})


def test_rank_and_shape_errors_name_the_field() -> None:
    from pydantic import ValidationError

    from engine.tasks.lm.spec import LMConfig

    with pytest.raises(ValidationError, match=r"lora\.r"):
        LMConfig.model_validate({"lora": {"r": 0}})
    with pytest.raises(ValidationError, match="lm.model.heads=3 must divide"):
        LMConfig.model_validate({"model": {"heads": 3}})
    assert LMConfig.model_validate({"lora": {"targets": ["attention", "q_proj", "down_proj"]}}).lora.target_list() \
        == ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]


def test_a_live_seq_len_change_reaches_batches_built_by_data_workers(corpus_file) -> None:
    """Data workers hold a copy of the task from when they started: after a live seq_len change they must not
    serve windows of the old length (they are replaced; the run equals one that builds every batch inline)."""
    from engine.run.control.requests import Controls, set_value
    from engine.run.sinks import EventBus, MemorySink
    from engine.training.loop import Trainer

    def losses(**runtime) -> dict[int, float]:
        sink = MemorySink()
        trainer = Trainer(make_config(corpus_file, train={"max_steps": 6}, evaluation={"every": 0}, runtime=runtime),
                          EventBus([sink]), Controls())
        trainer.setup()
        try:
            while trainer.step < 6:
                if trainer.step == 3:
                    trainer.control.apply([set_value("seq_len", 16)])
                trainer.train_step()
                trainer.log_step()
        finally:
            trainer.prefetch.close()
        return {e.step: e.loss for e in sink.drain() if e.type == "step"}

    assert losses(data_workers=1) == losses(prefetch=False)
