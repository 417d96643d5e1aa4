import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from shardlab.recipes import data, data_cache
from shardlab.recipes.model import byte_tokenizer
from tests.recipes.data_helpers import refusals, stream as _stream, write_records


def test_embedded_corpus_is_real_text():
    text = data.embedded_corpus()
    assert len(text) > 100_000 and "assignment" in text.lower()


def _prepare(tokenizer_folder, root, path, field="text", seq_len=4, workers=1):
    return data_cache.prepare_data(None if path is None else str(path), field, seq_len, tokenizer_folder, workers, root)


def _ids(*texts):
    """The token stream of these documents as packing builds it: each one's bytes, then EOS (1)."""
    tok = byte_tokenizer()
    return [i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv"])
def test_each_record_file_type_packs_its_documents_in_order(tokenizer_folder, tmp_path, kind):
    records = [{"text": "hello world", "n": 1}, {"text": "  ", "n": 2}, {"text": "again", "n": 3}]
    cache = _prepare(tokenizer_folder, tmp_path / "cache", write_records(tmp_path / f"d.{kind}", kind, records))
    want = _ids("hello world", "again")  # the blank record is dropped
    assert _stream(cache) == want[: len(want) // 4 * 4]
    assert cache.summary() == {"format": "text", "records": 3, "sequences": len(want) // 4, "tokens": len(want) // 4 * 4,
                               "label_tokens": len(want) // 4 * 4, "truncated": len(want) % 4, "dropped": 1,
                               "cache": str(cache.folder)}


def test_text_markdown_a_folder_and_the_field_flag(tokenizer_folder, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("first file\nline two\n")
    (tmp_path / "d" / "b.md").write_text("# title\n")
    write_records(tmp_path / "d" / "c.jsonl", "jsonl", [{"body": "record one"}, {"body": "record two"}])
    write_records(tmp_path / "d" / "d.txt", "jsonl", [])  # empty: dropped
    (tmp_path / "d" / "ignored.bin").write_bytes(b"\0")
    cache = _prepare(tokenizer_folder, tmp_path / "cache", tmp_path / "d", field="body", seq_len=1)
    assert _stream(cache) == _ids("first file\nline two\n", "# title\n", "record one", "record two")
    assert (cache.meta["records"], cache.meta["dropped"]) == (5, 1)


def test_a_text_file_in_many_pieces_is_one_document(tokenizer_folder, tmp_path, monkeypatch):
    from shardlab.recipes import data_load

    monkeypatch.setattr(data_load, "CHUNK", 100)  # the embedded corpus in ~1,800 pieces
    text = data.embedded_corpus()
    cache = _prepare(tokenizer_folder, tmp_path / "cache", tmp_path / "c.txt" if (tmp_path / "c.txt").write_text(text) else None, seq_len=128, workers=2)
    assert _stream(cache) == data.token_blocks([text], byte_tokenizer(), 128).flatten().tolist()


def test_a_save_to_disk_folder(tokenizer_folder, tmp_path):
    import datasets

    datasets.Dataset.from_dict({"content": ["saved one", "saved two"]}).save_to_disk(str(tmp_path / "saved"))
    cache = _prepare(tokenizer_folder, tmp_path / "cache", tmp_path / "saved", field="content", seq_len=1)
    assert _stream(cache) == _ids("saved one", "saved two")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["dict"]})}).save_to_disk(str(tmp_path / "dict"))
    assert _stream(_prepare(tokenizer_folder, tmp_path / "cache", tmp_path / "dict", seq_len=1)) == _ids("dict")


def test_packing_the_embedded_corpus_equals_the_in_memory_blocks(tokenizer_folder, tmp_path):
    """The shipped corpus gives the blocks it gave before the cache (so the losses of every run are unchanged)."""
    cache = _prepare(tokenizer_folder, tmp_path, None, seq_len=128, workers=2)
    blocks = data_cache.open_blocks(cache.blocks_file)
    assert blocks.dtype == np.uint32 and blocks.shape == (1410, 128)
    assert torch.equal(torch.from_numpy(blocks.astype(np.int64)), data.token_blocks([data.embedded_corpus()], byte_tokenizer(), 128))
    assert data.Blocks(blocks)[3].dtype == torch.int64


def test_the_cache_is_reused_rekeyed_and_rebuilt_when_corrupt(tokenizer_folder, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text for the cache")
    first = _prepare(tokenizer_folder, tmp_path / "cache", corpus)
    again = _prepare(tokenizer_folder, tmp_path / "cache", corpus)
    assert first.built and not again.built and again.folder == first.folder and again.meta == first.meta
    assert _prepare(tokenizer_folder, tmp_path / "cache", corpus, seq_len=5).folder != first.folder
    assert _prepare(tokenizer_folder, tmp_path / "cache", corpus, field="body").folder != first.folder
    corpus.write_text("other text, longer, for the cache")  # size and time change: another key
    changed = _prepare(tokenizer_folder, tmp_path / "cache", corpus)
    assert changed.built and changed.folder != first.folder
    with open(changed.blocks_file, "r+b") as f:  # cut short, as a full disk or a killed copy leaves it
        f.truncate(100)
    rebuilt = _prepare(tokenizer_folder, tmp_path / "cache", corpus)
    assert rebuilt.built and rebuilt.folder == changed.folder and _stream(rebuilt) == _stream(first)[:0] + _ids("other text, longer, for the cache")[:32]
    assert len(rebuilt.warnings) == 1 and "does not read back" in rebuilt.warnings[0] and "rebuilt it" in rebuilt.warnings[0]
    (rebuilt.folder / "meta.json").write_text("{not json")
    assert _prepare(tokenizer_folder, tmp_path / "cache", corpus).built
    assert [p.name for p in (tmp_path / "cache" / "data").iterdir() if p.name.startswith(".") and ".tmp-" in p.name] == []


def _bad_inputs(tmp):
    (tmp / "empty").mkdir()
    (tmp / "blank.txt").write_text("   \n")
    (tmp / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
    write_records(tmp / "nofield.jsonl", "jsonl", [{"body": "x"}])
    write_records(tmp / "someless.jsonl", "jsonl", [{"text": "x"}, {"body": "y"}])
    write_records(tmp / "nocol.parquet", "parquet", [{"body": "x"}])
    write_records(tmp / "numbers.csv", "csv", [{"text": 1}, {"text": 2}])
    write_records(tmp / "blank.jsonl", "jsonl", [{"text": ""}, {"text": " "}])
    (tmp / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    return {
        "missing": (tmp / "nope.txt", f"--data {tmp / 'nope.txt'}: no such file or folder"),
        "folder without data files": (tmp / "empty", "no .txt, .md, .jsonl, .json, .parquet or .csv files found"),
        "blank text file": (tmp / "blank.txt", "the files hold no text"),
        "a jsonl line that is not JSON": (tmp / "bad.jsonl", f"--data {tmp / 'bad.jsonl'}: line 2 is not JSON"),
        "records without the field": (tmp / "nofield.jsonl", "its records have no 'text' field (they have: body); give --data-field"),
        "a record without the field": (tmp / "someless.jsonl", "record 2 has no 'text' field"),
        "parquet without the column": (tmp / "nocol.parquet", f"--data {tmp / 'nocol.parquet'}: its records have no 'text' field"),
        "a field that is not text": (tmp / "numbers.csv", "field 'text' holds Value('int64'), not text"),
        "records all blank": (tmp / "blank.jsonl", "the files hold no text (2 documents, all empty)"),
        "not utf-8": (tmp / "latin1.txt", "not UTF-8 text"),
    }


def test_bad_data_is_one_line_naming_the_file_and_the_fix(tokenizer_folder, tmp_path):
    cache = tmp_path / "cache"
    failures = refusals(_bad_inputs(tmp_path), lambda path: _prepare(tokenizer_folder, cache, path), cache)
    assert not failures, "\n".join(failures)


def test_blocks_are_eos_joined_and_fixed_length():
    tok = byte_tokenizer()
    blocks = data.token_blocks(["ab", "cd"], tok, seq_len=3)
    assert blocks.shape == (2, 3)
    assert blocks.flatten().tolist() == tok("ab")["input_ids"] + [tok.eos_token_id] + tok("cd")["input_ids"] + [tok.eos_token_id]


# Splits of one global batch of 8 sequences: (world size, micro-batch, grad-accum).
SPLITS = [(4, 2, 1), (2, 2, 2), (1, 2, 4), (2, 4, 1), (1, 8, 1)]
N_BLOCKS = 37  # 4 global batches of 8 per epoch; the last 5 blocks of each epoch's order are left out


def _micro_batches(world: int, mb: int, accum: int, epoch: int, steps_done: int = 0) -> list[list[list[list[int]]]]:
    """[step][rank][micro-batch] -> block indices, one epoch, as each rank's DataLoader would batch them."""
    ranks = []
    for rank in range(world):
        sampler = data.GlobalBatchSampler(N_BLOCKS, mb, accum, world, rank, seed=3, steps_done=steps_done)
        sampler.set_epoch(epoch)
        flat = list(sampler)
        ranks.append([[flat[i:i + mb] for i in range(s, s + mb * accum, mb)] for s in range(0, len(flat), mb * accum)])
    return [list(step) for step in zip(*ranks)]


def _step_sets(world: int, mb: int, accum: int, epochs: int = 2, steps_done: int = 0) -> list[list[int]]:
    """The sorted sequences of every optimizer step, over `epochs` epochs, all ranks together."""
    return [sorted(i for rank in step for micro in rank for i in micro)
            for epoch in range(epochs) for step in _micro_batches(world, mb, accum, epoch, steps_done)]


def test_every_split_of_a_global_batch_trains_each_step_on_the_same_sequences():
    reference = _step_sets(*SPLITS[0])
    assert len(reference) == 8 and all(len(s) == 8 for s in reference)
    for split in SPLITS[1:]:
        assert _step_sets(*split) == reference, split


@pytest.mark.parametrize("split", SPLITS)
def test_each_rank_takes_its_documented_slice_of_the_global_batch(split):
    world, mb, accum = split
    for epoch in range(2):
        order = data.epoch_order(N_BLOCKS, seed=3, epoch=epoch).tolist()
        steps = _micro_batches(world, mb, accum, epoch)
        assert len(steps) == N_BLOCKS // 8  # whole global batches only: the epoch's tail is left out
        for k, step in enumerate(steps):
            global_batch = order[8 * k: 8 * (k + 1)]
            seen = [i for rank in step for micro in rank for i in micro]
            assert sorted(seen) == sorted(global_batch) and len(set(seen)) == 8  # disjoint, and all of it
            for r, rank in enumerate(step):  # rank r: positions [r*P, (r+1)*P); micro-batch j: its j-th mb of them
                for j, micro in enumerate(rank):
                    first = r * mb * accum + j * mb
                    assert micro == global_batch[first:first + mb]


@pytest.mark.parametrize("done", [3, 4, 6])  # mid-epoch, at the epoch's end, in the second epoch
@pytest.mark.parametrize("before,after", [(SPLITS[0], SPLITS[1]), (SPLITS[2], SPLITS[3]), (SPLITS[4], SPLITS[0])])
def test_a_position_in_steps_continues_under_another_split(before, after, done):
    assert _step_sets(*after, steps_done=done) == _step_sets(*before)[done:]


def test_every_rank_and_split_divides_by_the_targets_of_the_whole_global_batch():
    rng = np.random.default_rng(0)
    labels = np.where(rng.random((N_BLOCKS, 6)) < 0.5, 7, -100).astype(np.int32)
    for world, mb, accum in SPLITS:
        for epoch in range(2):
            order = data.epoch_order(N_BLOCKS, seed=3, epoch=epoch).tolist()
            for rank in range(world):
                sampler = data.GlobalBatchSampler(N_BLOCKS, mb, accum, world, rank, seed=3, labels=labels)
                sampler.set_epoch(epoch)
                items = list(sampler)
                for k in range(len(items) // (mb * accum)):  # optimizer step k: every item carries its global batch's count
                    want = int((labels[order[8 * k:8 * (k + 1)], 1:] != -100).sum())
                    assert {n for _, n in items[k * mb * accum:(k + 1) * mb * accum]} == {want}
    batch = next(iter(torch.utils.data.DataLoader(data.Blocks(labels.astype(np.uint32), labels), batch_size=2,
                                                  sampler=data.GlobalBatchSampler(N_BLOCKS, 2, 1, 1, 0, 3, labels=labels))))
    assert set(batch) == {"input_ids", "labels", "step_label_tokens"} and batch["labels"].dtype == torch.int64
    assert batch["labels"].shape == (2, 6) and batch["step_label_tokens"].tolist() == [batch["step_label_tokens"][0]] * 2


# Two processes preparing one cache at the same moment (recipes/data_cache.py). Each runs this: it meets the other,
# then prepares the cache under `root`/locked; then, as on a shared filesystem whose locks do not reach the other
# process, under `root`/unlocked without the lock, meeting the other again after building, before publishing, so
# that the two renames race. One JSON line each.
PREPARE_TOGETHER = """
import contextlib, json, os, sys, time
from pathlib import Path
import datasets, transformers  # imported before meeting: the two calls start within milliseconds
from shardlab.recipes import data_cache

def meet(name):
    Path(f"{name}.{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while len(list(Path(name).parent.glob(Path(name).name + ".*"))) < 2:
        assert time.monotonic() < deadline, "the other process never came"
        time.sleep(0.002)

def prepare(root):
    meet(f"{root}-start")
    cache = data_cache.prepare_data(data, "text", 64, Path(tokenizer), 1, Path(root), "auto")
    arrays = [data_cache.open_blocks(f).tolist() for f in (cache.blocks_file, cache.labels_file)]
    print(json.dumps({"folder": str(cache.folder), "built": cache.built, "meta": cache.meta, "arrays": arrays}))

data, tokenizer, root = sys.argv[1:]
prepare(f"{root}/locked")
publish = data_cache._publish
data_cache._locked = lambda lock: contextlib.nullcontext()
data_cache._publish = lambda *args: (meet(f"{root}/unlocked-built"), publish(*args))[1]
prepare(f"{root}/unlocked")
"""


def test_two_processes_preparing_one_cache_at_once_get_the_same_whole_cache(tokenizer_folder, tmp_path):
    records = [{"prompt": f"question {i}", "completion": "answer " * (i % 5)} for i in range(40)]
    path = write_records(tmp_path / "c.jsonl", "jsonl", records)
    procs = [subprocess.Popen([sys.executable, "-c", PREPARE_TOGETHER, str(path), str(tokenizer_folder), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    for k, mode in enumerate(("locked", "unlocked")):
        results = [json.loads(out.strip().splitlines()[k]) for out, _ in outs]
        assert results[0] == results[1] | {"built": results[0]["built"]}, mode  # the same folder, counts, blocks, labels
        assert results[0]["meta"]["sequences"] == len(results[0]["arrays"][0]) > 0
        # locked: one builds, the other waits and reads it; unlocked: both build, one rename wins, the other copy goes
        assert sorted(r["built"] for r in results) == ([False, True] if mode == "locked" else [True, True]), mode
        folders = [p.name for p in (tmp_path / mode / "data").iterdir() if not p.name.endswith(".lock")]
        assert folders == [Path(results[0]["folder"]).name], (mode, folders)  # no temporary folder left either
        again = data_cache.prepare_data(str(path), "text", 64, tokenizer_folder, 1, tmp_path / mode, "auto")
        assert not again.built and again.meta == results[0]["meta"]  # and it reads back
    # what a killed build left on this host goes with the next preparation; a running one's, or another host's, stays
    dead = subprocess.Popen(["true"])
    dead.wait()
    root, name = tmp_path / "locked" / "data", Path(results[0]["folder"]).name
    host = socket.gethostname()
    left = {who: root / f".{name}.tmp-{h}-{pid}-0a1b2c3d" for who, h, pid in
            (("dead", host, dead.pid), ("running", host, os.getpid()), ("elsewhere", "other-node", dead.pid))}
    for folder in left.values():
        (folder / "hf").mkdir(parents=True)
    data_cache.prepare_data(str(path), "text", 64, tokenizer_folder, 1, tmp_path / "locked", "auto")
    assert {who: folder.exists() for who, folder in left.items()} == {"dead": False, "running": True, "elsewhere": True}
