import json

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from shardlab.core.errors import UserError
from shardlab.recipes import data, data_cache, data_chat
from shardlab.recipes.model import byte_tokenizer


def test_embedded_corpus_is_real_text():
    text = data.embedded_corpus()
    assert len(text) > 100_000 and "assignment" in text.lower()


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    byte_tokenizer().save_pretrained(folder)
    return folder


def _prepare(tokenizer_folder, root, path, field="text", seq_len=4, workers=1):
    return data_cache.prepare_data(None if path is None else str(path), field, seq_len, tokenizer_folder, workers, root)


def _ids(*texts):
    """The token stream of these documents as packing builds it: each one's bytes, then EOS (1)."""
    tok = byte_tokenizer()
    return [i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]


def _stream(cache):
    return data_cache.open_blocks(cache.blocks_file).reshape(-1).tolist()


def _write(path, kind, records):
    import pandas as pd

    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif kind == "json":
        path.write_text(json.dumps(records))
    elif kind == "parquet":
        pd.DataFrame(records).to_parquet(path)
    elif kind == "csv":
        pd.DataFrame(records).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv"])
def test_each_record_file_type_packs_its_documents_in_order(tokenizer_folder, tmp_path, kind):
    records = [{"text": "hello world", "n": 1}, {"text": "  ", "n": 2}, {"text": "again", "n": 3}]
    cache = _prepare(tokenizer_folder, tmp_path / "cache", _write(tmp_path / f"d.{kind}", kind, records))
    want = _ids("hello world", "again")  # the blank record is dropped
    assert _stream(cache) == want[: len(want) // 4 * 4]
    assert cache.summary() == {"format": "text", "records": 3, "sequences": len(want) // 4, "tokens": len(want) // 4 * 4,
                               "label_tokens": len(want) // 4 * 4, "truncated": len(want) % 4, "dropped": 1,
                               "cache": str(cache.folder)}


def test_text_markdown_a_folder_and_the_field_flag(tokenizer_folder, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("first file\nline two\n")
    (tmp_path / "d" / "b.md").write_text("# title\n")
    _write(tmp_path / "d" / "c.jsonl", "jsonl", [{"body": "record one"}, {"body": "record two"}])
    _write(tmp_path / "d" / "d.txt", "jsonl", [])  # empty: dropped
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
    _write(tmp / "nofield.jsonl", "jsonl", [{"body": "x"}])
    _write(tmp / "someless.jsonl", "jsonl", [{"text": "x"}, {"body": "y"}])
    _write(tmp / "nocol.parquet", "parquet", [{"body": "x"}])
    _write(tmp / "numbers.csv", "csv", [{"text": 1}, {"text": 2}])
    _write(tmp / "blank.jsonl", "jsonl", [{"text": ""}, {"text": " "}])
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
    failures = []
    for name, (path, expected) in _bad_inputs(tmp_path).items():
        try:
            _prepare(tokenizer_folder, tmp_path / "cache", path)
            failures.append(f"{name}: no error")
        except UserError as e:
            if expected not in str(e) or "\n" in str(e):
                failures.append(f"{name}: {e}")
    assert not failures, "\n".join(failures)
    assert not [p for p in (tmp_path / "cache" / "data").iterdir() if not p.name.endswith(".lock")]  # nothing half written


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


# The datamodule in a real Lightning Trainer (one CPU process): the state it writes, and a resume under
# another micro-batch x grad-accum split of the same global batch.
class _Recorder(pl.LightningModule):
    """Records the blocks (each block holds its own index) trained on in every optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.steps: dict[int, list[int]] = {}

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.steps.setdefault(self.trainer.global_step, []).extend(batch[:, 0].tolist())
        return (self.w * batch.float()).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class _SaveAt(pl.Callback):
    def __init__(self, step: int, path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and not self.path.exists():  # right after the step, as PeriodicCheckpoint
            trainer.save_checkpoint(self.path)


def _trainer(accum: int, max_steps: int, callbacks=()) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, accumulate_grad_batches=accum,
                      use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                      enable_model_summary=False, enable_progress_bar=False, callbacks=list(callbacks))


def _fit(mb: int, accum: int, max_steps: int, save=None, resume=None) -> dict[int, list[int]]:
    module, blocks = _Recorder(), torch.arange(21).view(21, 1)  # 5 global batches of 4 per epoch
    trainer = _trainer(accum, max_steps, [_SaveAt(*save)] if save else [])
    trainer.fit(module, datamodule=data.LlamaData(blocks, mb, seed=0, grad_accum=accum), ckpt_path=resume)
    assert trainer.global_step == max_steps
    return {step: sorted(seqs) for step, seqs in module.steps.items()}


@pytest.fixture(scope="module")
def uninterrupted() -> dict[int, list[int]]:
    return _fit(2, 2, 12)


# (micro-batch, grad-accum) before and after, and the step of the checkpoint: mid-epoch, at the epoch's end,
# in the second epoch
@pytest.mark.parametrize("before,after,done", [((2, 2), (1, 4), 3), ((1, 4), (4, 1), 5), ((4, 1), (4, 1), 7)])
def test_lightning_resume_under_another_split_trains_the_uninterrupted_steps(uninterrupted, tmp_path, before, after, done):
    full = uninterrupted
    ckpt = tmp_path / "state.ckpt"
    _fit(*before, done, save=(done, ckpt))
    state = torch.load(ckpt, weights_only=False)["LlamaData"]
    assert state == {"optimizer_steps": done, "global_batch": 4, "grad_accum": before[1], "blocks": 21}
    resumed = _fit(*after, 12, resume=str(ckpt))
    assert resumed == {step: full[step] for step in range(done, 12)}


def test_a_resume_that_cannot_continue_the_data_is_refused():
    module = data.LlamaData(torch.zeros(21, 1, dtype=torch.long), micro_batch_size=2, seed=0, grad_accum=2)
    module.trainer = _trainer(2, 1)
    with pytest.raises(UserError, match="ordered data per rank"):
        module.load_state_dict({"epoch": 0, "batches_done": 6})  # written before global-batch order
    with pytest.raises(UserError, match="global batches of 8 sequences, this run's are 4"):
        module.load_state_dict({"optimizer_steps": 3, "global_batch": 8, "grad_accum": 2, "blocks": 21})
    with pytest.raises(UserError, match="trained on 40 blocks, --data now gives 21"):
        module.load_state_dict({"optimizer_steps": 3, "global_batch": 4, "grad_accum": 2, "blocks": 40})


# Chat and instruction data (recipes/data_chat.py, recipes/data_pack.py pack_examples): rendered with a chat template,
# packed whole into blocks, trained on the assistant's tokens only.
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
END_OF_TURN = {"plain": "</s>", "llama3": "<|eot_id|>", "chatml": "<|im_end|>\n"}  # what follows an assistant's content
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Café?"},
                {"role": "assistant", "content": "Oui.\n"}, {"role": "user", "content": "And tea?"},
                {"role": "assistant", "content": " Non, merci "}]


def _tokenizer(kind: str):
    """The byte-level tokenizer as it is (plain: no chat template), with Llama 3's special tokens, or with a ChatML
    template of its own."""
    tok = byte_tokenizer()
    if kind == "llama3":
        tok.add_special_tokens({"additional_special_tokens": list(data_chat.LLAMA3_TOKENS)})
    elif kind == "chatml":
        tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="module")
def chat_tokenizers(tmp_path_factory) -> dict:
    folders = {}
    for kind in END_OF_TURN:
        folders[kind] = tmp_path_factory.mktemp(f"tokenizer-{kind}")
        _tokenizer(kind).save_pretrained(folders[kind])
    return folders


def _chat(folder, root, path, fmt="auto", seq_len=64, long_examples="truncate", workers=1):
    return data_cache.prepare_data(str(path), "text", seq_len, folder, workers, root, fmt, long_examples)


def _arrays(cache):
    return data_cache.open_blocks(cache.blocks_file), data_cache.open_blocks(cache.labels_file)


def _label_runs(tok, labels) -> list[str]:
    """The target tokens of a label array, decoded run by run."""
    runs, run = [], []
    for label in [*labels.reshape(-1).tolist(), -100]:
        if label != -100:
            run.append(label)
        elif run:
            runs.append(tok.decode(run))
            run = []
    return runs


@pytest.mark.parametrize("kind", list(END_OF_TURN))
def test_chat_labels_decode_to_exactly_the_assistant_turns(chat_tokenizers, tmp_path, kind):
    tok = _tokenizer(kind)
    template, name = data_chat.template_for(tok)
    assert name.startswith({"plain": "the plain-text default", "llama3": "the Llama 3 default", "chatml": "the tokenizer's"}[kind])
    cache = _chat(chat_tokenizers[kind], tmp_path, _write(tmp_path / "c.jsonl", "jsonl", [{"messages": CONVERSATION}]),
                  seq_len=256)
    blocks, labels = _arrays(cache)
    text, _ = data_chat.render(tok, template, CONVERSATION)
    want = tok(text, add_special_tokens=False)["input_ids"]
    assert blocks.shape == labels.shape == (1, 256) and labels.dtype == np.int32
    assert blocks[0, :len(want)].tolist() == want and set(blocks[0, len(want):].tolist()) == {tok.eos_token_id}
    assert _label_runs(tok, labels) == ["Oui.\n" + END_OF_TURN[kind], " Non, merci " + END_OF_TURN[kind]]
    assert cache.summary()["label_tokens"] == int((labels != -100).sum()) and cache.meta["template"] == name
    if kind == "plain":
        assert text == ("### System:\nBe brief.\n\n### User:\nCafé?\n\n### Assistant:\nOui.\n</s>\n\n### User:\nAnd tea?"
                        "\n\n### Assistant:\n Non, merci </s>")
    if kind == "llama3":  # Llama 3's published format
        assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                               "<|start_header_id|>user<|end_header_id|>\n\nCafé?<|eot_id|>")


def test_prompt_completion_and_alpaca_records_are_a_user_and_an_assistant_turn(tokenizer_folder, tmp_path):
    assert data_chat.to_messages({"prompt": "2 + 2?", "completion": " 4"}, "prompt-completion") == [
        {"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": " 4"}]
    assert data_chat.to_messages({"instruction": "Add.", "input": "2 and 2", "output": "4"}, "alpaca")[0] == {
        "role": "user", "content": "Add.\n\n2 and 2"}
    assert data_chat.to_messages({"instruction": "Add.", "input": " ", "output": "4"}, "alpaca")[0]["content"] == "Add."
    tok = byte_tokenizer()
    pc = _chat(tokenizer_folder, tmp_path, _write(tmp_path / "pc.jsonl", "jsonl", [{"prompt": "2 + 2?", "completion": " 4"}]))
    alpaca = _chat(tokenizer_folder, tmp_path, _write(tmp_path / "a.parquet", "parquet", [
        {"instruction": "Add.", "input": "2 and 2", "output": "4"}, {"instruction": "Say hi.", "input": None, "output": "hi"}]),
                   seq_len=48)
    assert (pc.meta["format"], alpaca.meta["format"]) == ("prompt-completion", "alpaca")
    assert tok.decode(_arrays(pc)[0][0]).startswith("### User:\n2 + 2?\n\n### Assistant:\n 4</s></s>")
    assert _label_runs(tok, _arrays(pc)[1]) == [" 4</s>"]
    assert [tok.decode(b).rstrip("</s>") for b in _arrays(alpaca)[0]] == [
        "### User:\nAdd.\n\n2 and 2\n\n### Assistant:\n4", "### User:\nSay hi.\n\n### Assistant:\nhi"]
    assert _label_runs(tok, _arrays(alpaca)[1]) == ["4</s>", "hi</s>"]


def test_auto_finds_the_format_from_the_fields_and_text_stays_as_it_was(tokenizer_folder, tmp_path):
    assert [data_chat.detect(c) for c in (["text", "messages"], ["prompt", "completion", "id"], ["instruction", "output"],
                                          ["instruction", "input", "output"], ["text", "prompt"], ["body"])] == [
        "chat", "prompt-completion", "alpaca", "alpaca", "text", "text"]
    records = _write(tmp_path / "t.jsonl", "jsonl", [{"text": "hello world", "prompt": "not a pair"}, {"text": "again"}])
    auto = data_cache.prepare_data(str(records), "text", 4, tokenizer_folder, 1, tmp_path / "a", "auto")
    text = data_cache.prepare_data(str(records), "text", 4, tokenizer_folder, 1, tmp_path / "t", "text")
    assert _stream(auto) == _stream(text) and auto.summary() | {"cache": ""} == text.summary() | {"cache": ""}
    assert auto.labels_file is None and not (auto.folder / "labels.npy").exists()
    assert auto.meta["found"].startswith("text records") and text.meta["found"] is None
    chat = _chat(tokenizer_folder, tmp_path, _write(tmp_path / "c.jsonl", "jsonl", [{"messages": CONVERSATION}]), seq_len=128)
    assert chat.meta["found"] == "chat records ('messages'), trained on the assistant's tokens only"
    txt = tmp_path / "d.txt"
    txt.write_text("plain text, no fields")
    assert _chat(tokenizer_folder, tmp_path, txt, seq_len=4).meta["found"] is None  # text files: nothing to find


def test_examples_are_packed_whole_and_no_label_crosses_into_the_next_example(tokenizer_folder, tmp_path):
    tok = byte_tokenizer()
    records = [{"prompt": f"q{i}", "completion": "a" * (i % 4)} for i in range(12)]
    cache = _chat(tokenizer_folder, tmp_path, _write(tmp_path / "p.jsonl", "jsonl", records), seq_len=72)
    blocks, labels = _arrays(cache)
    examples = []
    for row, lab in zip(blocks.tolist(), labels.tolist()):
        text = tok.decode(row)
        assert text.startswith("### User:\nq")  # every block starts with an example: none spans two blocks
        starts = [k for k in range(len(row)) if k == 0 or row[k - 1] == tok.eos_token_id and row[k] != tok.eos_token_id]
        assert all(lab[k] == -100 for k in starts)  # an example's first token is no target
        examples += [e for e in text.split("</s>") if e]
    assert examples == [f"### User:\nq{i}\n\n### Assistant:\n" + "a" * (i % 4) for i in range(12)]  # in order, all
    assert _label_runs(tok, labels) == ["a" * (i % 4) + "</s>" for i in range(12)]  # padding EOS is no target
    assert cache.summary()["padding"] == blocks.size - sum(len(e) + 1 for e in examples)  # bytes, each EOS-ended
    assert data_chat.labels_of([5, 6, 7], [(0, 1), (1, 2), (2, 3)], [(0, 3)]) == [-100, 6, 7]  # even an assistant's first
    opening = [{"role": "assistant", "content": "Ask me."}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    text, spans = data_chat.render(tok, data_chat.PLAIN_TEMPLATE, opening)  # no prompt before the first turn
    assert [text[a:b] for a, b in spans] == ["Ask me.</s>", "a</s>"]


def test_long_examples_are_truncated_or_dropped_and_counted(tokenizer_folder, tmp_path):
    tok = byte_tokenizer()
    records = [{"prompt": "short", "completion": "ok"},
               {"prompt": "long answer", "completion": "b" * 100},  # its answer starts within the block: truncated
               {"prompt": "p" * 100, "completion": "lost"}]  # no answer within the first 64 tokens: dropped
    path = _write(tmp_path / "l.jsonl", "jsonl", records)
    cut = _chat(tokenizer_folder, tmp_path, path, seq_len=64)
    assert {k: cut.summary()[k] for k in ("records", "sequences", "truncated", "dropped")} == {
        "records": 3, "sequences": 2, "truncated": 1, "dropped": 1}
    blocks, labels = _arrays(cut)
    prompt = "### User:\nlong answer\n\n### Assistant:\n"
    assert tok.decode(blocks[1]) == prompt + "b" * (64 - len(prompt))  # its first 64 tokens, no EOS
    assert _label_runs(tok, labels) == ["ok</s>", "b" * (64 - len(prompt))]
    dropped = _chat(tokenizer_folder, tmp_path, path, seq_len=64, long_examples="drop")
    assert dropped.folder != cut.folder
    assert {k: dropped.summary()[k] for k in ("sequences", "truncated", "dropped")} == {"sequences": 1, "truncated": 0, "dropped": 2}
    assert dropped.summary()["label_tokens"] == 3 and cut.summary()["label_tokens"] == 3 + 64 - len(prompt)


def test_the_cache_key_holds_the_format_and_long_examples(tokenizer_folder, tmp_path):
    path = _write(tmp_path / "c.jsonl", "jsonl", [{"messages": CONVERSATION}])
    folders = {(fmt, le): _chat(tokenizer_folder, tmp_path, path, fmt=fmt, seq_len=128, long_examples=le).folder
               for fmt in ("auto", "chat") for le in ("truncate", "drop")}
    assert len(set(folders.values())) == 4
    assert _chat(tokenizer_folder, tmp_path, path, fmt="chat", seq_len=128).folder == folders["chat", "truncate"]


def test_rendering_over_several_processes_gives_the_same_examples(tokenizer_folder, tmp_path, monkeypatch):
    monkeypatch.setattr(data_chat, "BATCH", 4)
    monkeypatch.setattr(data_chat, "BYTES_PER_PROCESS", 1)  # 20 records: 2 processes
    records = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
               for i in range(20)]
    path = _write(tmp_path / "m.jsonl", "jsonl", records)
    one, two = (_chat(tokenizer_folder, tmp_path / f"w{n}", path, workers=n) for n in (1, 2))
    assert two.meta["workers"] == 2 and all(np.array_equal(a, b) for a, b in zip(_arrays(one), _arrays(two)))
    records[13]["messages"][1]["role"] = "narrator"  # in the second process's half
    with pytest.raises(UserError, match=f"^--data {path}: record 14: message 2 has role 'narrator'; the known roles"):
        _chat(tokenizer_folder, tmp_path / "w2", _write(path, "jsonl", records), workers=2)


def _bad_examples(tmp):
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    _write(tmp / "role.jsonl", "jsonl", [good, {"messages": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}]}])
    _write(tmp / "noanswer.jsonl", "jsonl", [good, good, {"messages": [{"role": "user", "content": "q"}]}])
    _write(tmp / "empty.jsonl", "jsonl", [good, {"messages": []}])
    _write(tmp / "nomessages.jsonl", "jsonl", [good, {"other": 1}])
    _write(tmp / "pc.jsonl", "jsonl", [{"prompt": "q", "completion": 3}])
    (tmp / "mixed").mkdir()
    _write(tmp / "mixed" / "a.jsonl", "jsonl", [good])
    (tmp / "mixed" / "b.txt").write_text("text")
    (tmp / "bad.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    _write(tmp / "long.jsonl", "jsonl", [{"prompt": "p" * 200, "completion": "c"}])
    return {  # flags, expected
        "an unknown role": ((tmp / "role.jsonl", "auto"), f"--data {tmp / 'role.jsonl'}: record 2: message 2 has role 'bot'"),
        "no assistant turn": ((tmp / "noanswer.jsonl", "auto"), f"{tmp / 'noanswer.jsonl'}: record 3: its 'messages' have no assistant turn"),
        "an empty messages list": ((tmp / "empty.jsonl", "chat"), "record 2: its 'messages' list is empty"),
        "a record without messages": ((tmp / "nomessages.jsonl", "chat"), "record 2 has no 'messages' field"),
        "records without the format asked for": ((tmp / "role.jsonl", "alpaca"),
                                                  "its records have no 'instruction' or 'output' field (they have: messages)"),
        "a completion that is not text": ((tmp / "pc.jsonl", "auto"), "field 'completion' holds Value('int64'), not text"),
        "a text file among chat records": ((tmp / "mixed", "auto"), f"--data {tmp / 'mixed' / 'b.txt'}: a text file among chat records"),
        "a line that is not JSON": ((tmp / "bad.jsonl", "chat"), f"--data {tmp / 'bad.jsonl'}: line 2 is not JSON"),
        "every example too long": ((tmp / "long.jsonl", "auto"), "no example is left to train on: all 1 prompt-completion examples"),
    }


def test_bad_chat_data_is_one_line_naming_the_file_and_the_record(tokenizer_folder, tmp_path):
    failures = []
    for name, ((path, fmt), expected) in _bad_examples(tmp_path).items():
        try:
            _chat(tokenizer_folder, tmp_path / "cache", path, fmt=fmt, long_examples="drop")
            failures.append(f"{name}: no error")
        except UserError as e:
            if expected not in str(e) or "\n" in str(e):
                failures.append(f"{name}: {e}")
    assert not failures, "\n".join(failures)
    assert not [p for p in (tmp_path / "cache" / "data").iterdir() if not p.name.endswith(".lock")]  # nothing half written


# Labels in the loss (recipes/loss.py, recipes/module.py): the targets' summed loss over the whole global batch's targets.
def _liger_on_cuda() -> bool:
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("liger_kernel") is not None


@pytest.mark.parametrize("head", ["hf", "chunked", pytest.param("fused", marks=pytest.mark.skipif(
    not _liger_on_cuda(), reason="Liger's fused loss runs on CUDA with liger-kernel installed"))])
def test_labels_are_the_targets_of_the_loss_after_the_shift(head):
    from transformers import LlamaConfig, LlamaForCausalLM

    from shardlab.recipes import loss as loss_lib

    torch.manual_seed(0)
    device = "cuda" if head == "fused" else "cpu"
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=97)).to(device)
    ids = torch.randint(0, 97, (3, 17), device=device)
    targets = torch.rand(3, 17, device=device) < 0.4
    labels = torch.where(targets, ids, torch.full_like(ids, -100))
    with torch.no_grad():  # position t's logits score token t + 1, where it is a target
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
    want = -sum(logp[b, t, ids[b, t + 1]] for b in range(3) for t in range(16) if targets[b, t + 1]) / 7.5
    if head == "chunked":
        loss_lib.use_chunked_loss(model)
    elif head == "fused":
        loss_lib.use_fused_loss(model)
    divisor = torch.tensor(7.5, device=device)
    loss = loss_lib.causal_lm_loss(model, ids, labels, divisor)
    assert torch.allclose(loss, want, rtol=1e-5 if head != "fused" else 1e-4)
    none = loss_lib.causal_lm_loss(model, ids, torch.full_like(ids, -100), divisor)  # no targets: 0, not NaN
    none.backward()
    assert none.item() == 0 and all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


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
