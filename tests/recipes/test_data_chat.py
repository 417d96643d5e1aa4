"""Chat and instruction data (recipes/data_chat.py, recipes/data_pack.py): rendered with a chat template, packed whole
into blocks, trained on the assistant's tokens only."""
import json

import numpy as np
import pytest

from shardlab.core.errors import UserError
from shardlab.recipes import data_cache, data_chat, data_pack
from shardlab.recipes.model import byte_tokenizer
from tests.recipes.data_helpers import refusals, stream as _stream, write_records


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
    cache = _chat(chat_tokenizers[kind], tmp_path, write_records(tmp_path / "c.jsonl", "jsonl", [{"messages": CONVERSATION}]),
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
    pc = _chat(tokenizer_folder, tmp_path, write_records(tmp_path / "pc.jsonl", "jsonl", [{"prompt": "2 + 2?", "completion": " 4"}]))
    alpaca = _chat(tokenizer_folder, tmp_path, write_records(tmp_path / "a.parquet", "parquet", [
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
    records = write_records(tmp_path / "t.jsonl", "jsonl", [{"text": "hello world", "prompt": "not a pair"}, {"text": "again"}])
    auto = data_cache.prepare_data(str(records), "text", 4, tokenizer_folder, 1, tmp_path / "a", "auto")
    text = data_cache.prepare_data(str(records), "text", 4, tokenizer_folder, 1, tmp_path / "t", "text")
    assert _stream(auto) == _stream(text) and auto.summary() | {"cache": ""} == text.summary() | {"cache": ""}
    assert auto.labels_file is None and not (auto.folder / "labels.npy").exists()
    assert auto.meta["found"].startswith("text records") and text.meta["found"] is None
    chat = _chat(tokenizer_folder, tmp_path, write_records(tmp_path / "c.jsonl", "jsonl", [{"messages": CONVERSATION}]), seq_len=128)
    assert chat.meta["found"] == "chat records ('messages'), trained on the assistant's tokens only"
    txt = tmp_path / "d.txt"
    txt.write_text("plain text, no fields")
    assert _chat(tokenizer_folder, tmp_path, txt, seq_len=4).meta["found"] is None  # text files: nothing to find


@pytest.mark.parametrize("windows", [False, True])  # one window, or a window of about one block (in 4-row batches)
def test_examples_are_packed_whole_and_no_label_crosses_into_the_next_example(tokenizer_folder, tmp_path, monkeypatch,
                                                                              windows):
    if windows:
        monkeypatch.setattr(data_pack, "WINDOW_TOKENS", 1)
        monkeypatch.setattr(data_pack, "WINDOW_BLOCKS", 1)
        monkeypatch.setattr(data_chat, "BATCH", 4)
    tok = byte_tokenizer()
    records = [{"prompt": f"q{i}", "completion": "a" * (i % 4)} for i in range(12)]
    cache = _chat(tokenizer_folder, tmp_path, write_records(tmp_path / "p.jsonl", "jsonl", records), seq_len=72)
    blocks, labels = _arrays(cache)
    examples = []
    for row, lab in zip(blocks.tolist(), labels.tolist()):
        text = tok.decode(row)
        assert text.startswith("### User:\nq")  # every block starts with an example: none spans two blocks
        starts = [k for k in range(len(row)) if k == 0 or row[k - 1] == tok.eos_token_id and row[k] != tok.eos_token_id]
        assert all(lab[k] == -100 for k in starts)  # an example's first token is no target
        here = [e for e in text.split("</s>") if e]
        assert [len(e) for e in here] == sorted((len(e) for e in here), reverse=True)  # longest first (best-fit decreasing)
        examples += here
    want = [f"### User:\nq{i}\n\n### Assistant:\n" + "a" * (i % 4) for i in range(12)]
    assert sorted(examples) == sorted(want)  # all, each once
    assert sorted(_label_runs(tok, labels)) == sorted("a" * (i % 4) + "</s>" for i in range(12))  # padding is no target
    assert cache.summary()["padding"] == blocks.size - sum(len(e) + 1 for e in examples)  # bytes, each EOS-ended
    assert cache.sequences == (7 if windows else 6)  # 380 tokens: 6 blocks of 72 at the fewest; small windows cost one
    assert data_chat.labels_of([5, 6, 7], [(0, 1), (1, 2), (2, 3)], [(0, 3)]) == [-100, 6, 7]  # even an assistant's first
    opening = [{"role": "assistant", "content": "Ask me."}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    text, spans = data_chat.render(tok, data_chat.PLAIN_TEMPLATE, opening)  # no prompt before the first turn
    assert [text[a:b] for a, b in spans] == ["Ask me.</s>", "a</s>"]


def test_best_fit_decreasing_fills_blocks_tighter_than_next_fit():
    """Longest first, each into the block with the least room that holds it; a separator is dropped at a block's end."""
    block, offset, left = data_pack.best_fit_decreasing(np.array([3, 6, 2, 5, 4]), np.zeros(5, np.int32), 10)
    assert block.tolist() == [1, 0, 1, 1, 0] and offset.tolist() == [5, 0, 8, 0, 6] and left == [0, 0]  # next fit: 3 blocks
    block, offset, left = data_pack.best_fit_decreasing(np.array([6, 3, 4, 0]), np.array([1, 1, 1, 0]), 10)
    assert block.tolist() == [0, 0, 1, -1] and offset.tolist() == [0, 7, 0, 0] and left == [0, 5]  # 3 ends block 0 exactly
    rng = np.random.default_rng(0)
    take, sep = rng.integers(1, 65, 2000), rng.integers(0, 2, 2000)
    block, offset, left = data_pack.best_fit_decreasing(take, sep, 64)
    again = data_pack.best_fit_decreasing(take, sep, 64)
    assert np.array_equal(again[0], block) and np.array_equal(again[1], offset) and again[2] == left  # fixed by the data
    for b in range(len(left)):  # no overlap, each separator inside its block unless the example ends it
        mine = sorted(np.flatnonzero(block == b), key=lambda i: offset[i])
        ends = [min(64, offset[i] + take[i] + sep[i]) for i in mine]
        assert offset[mine[0]] == 0 and all(offset[j] == e for j, e in zip(mine[1:], ends)) and left[b] == 64 - ends[-1]
    assert len(left) <= -(-int((take + sep).sum()) // 64) * 1.02 + 1  # within 2% of the bound


def test_the_shipped_chat_data_packs_into_the_fewest_blocks(tokenizer_folder, tmp_path):
    """examples/chat/arithmetic.jsonl at --seq-len 128: next fit left 22.0% padding (291 blocks), best-fit decreasing
    13.7% (263 blocks, the fewest there can be: the 126 examples over 64 tokens take a block each, with no room for
    any other example (all longer than 51 tokens), and the other 274 go two to a block)."""
    from tests.conftest import CHAT_DATA

    cache = _chat(tokenizer_folder, tmp_path, CHAT_DATA, seq_len=128)
    m = cache.meta
    assert (m["records"], m["sequences"], m["padding"], m["label_tokens"]) == (400, 263, 4613, 6473)
    assert m["padding"] / m["tokens"] < 0.14


def test_long_examples_are_truncated_or_dropped_and_counted(tokenizer_folder, tmp_path):
    tok = byte_tokenizer()
    records = [{"prompt": "short", "completion": "ok"},
               {"prompt": "long answer", "completion": "b" * 100},  # its answer starts within the block: truncated
               {"prompt": "p" * 100, "completion": "lost"}]  # no answer within the first 64 tokens: dropped
    path = write_records(tmp_path / "l.jsonl", "jsonl", records)
    cut = _chat(tokenizer_folder, tmp_path, path, seq_len=64)
    assert {k: cut.summary()[k] for k in ("records", "sequences", "truncated", "dropped")} == {
        "records": 3, "sequences": 2, "truncated": 1, "dropped": 1}
    blocks, labels = _arrays(cut)
    prompt = "### User:\nlong answer\n\n### Assistant:\n"
    assert tok.decode(blocks[0]) == prompt + "b" * (64 - len(prompt))  # its first 64 tokens, no EOS (the longest first)
    assert _label_runs(tok, labels) == ["b" * (64 - len(prompt)), "ok</s>"]
    dropped = _chat(tokenizer_folder, tmp_path, path, seq_len=64, long_examples="drop")
    assert dropped.folder != cut.folder
    assert {k: dropped.summary()[k] for k in ("sequences", "truncated", "dropped")} == {"sequences": 1, "truncated": 0, "dropped": 2}
    assert dropped.summary()["label_tokens"] == 3 and cut.summary()["label_tokens"] == 3 + 64 - len(prompt)


def test_the_cache_key_holds_the_format_and_long_examples(tokenizer_folder, tmp_path):
    path = write_records(tmp_path / "c.jsonl", "jsonl", [{"messages": CONVERSATION}])
    folders = {(fmt, le): _chat(tokenizer_folder, tmp_path, path, fmt=fmt, seq_len=128, long_examples=le).folder
               for fmt in ("auto", "chat") for le in ("truncate", "drop")}
    assert len(set(folders.values())) == 4
    assert _chat(tokenizer_folder, tmp_path, path, fmt="chat", seq_len=128).folder == folders["chat", "truncate"]


def test_rendering_over_several_processes_gives_the_same_examples(tokenizer_folder, tmp_path, monkeypatch):
    monkeypatch.setattr(data_chat, "BATCH", 4)
    monkeypatch.setattr(data_chat, "BYTES_PER_PROCESS", 1)  # 20 records: 2 processes
    monkeypatch.setattr(data_pack, "WINDOW_TOKENS", 100)  # packing windows of 100 tokens, across the 4-row batches
    monkeypatch.setattr(data_pack, "WINDOW_BLOCKS", 1)
    records = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
               for i in range(20)]
    path = write_records(tmp_path / "m.jsonl", "jsonl", records)
    one, two = (_chat(tokenizer_folder, tmp_path / f"w{n}", path, workers=n) for n in (1, 2))
    assert two.meta["workers"] == 2 and all(np.array_equal(a, b) for a, b in zip(_arrays(one), _arrays(two)))
    records[13]["messages"][1]["role"] = "narrator"  # in the second process's half
    with pytest.raises(UserError, match=f"^--data {path}: record 14: message 2 has role 'narrator'; the known roles"):
        _chat(tokenizer_folder, tmp_path / "w2", write_records(path, "jsonl", records), workers=2)


def _bad_examples(tmp):
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    write_records(tmp / "role.jsonl", "jsonl", [good, {"messages": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}]}])
    write_records(tmp / "noanswer.jsonl", "jsonl", [good, good, {"messages": [{"role": "user", "content": "q"}]}])
    write_records(tmp / "empty.jsonl", "jsonl", [good, {"messages": []}])
    write_records(tmp / "nomessages.jsonl", "jsonl", [good, {"other": 1}])
    write_records(tmp / "pc.jsonl", "jsonl", [{"prompt": "q", "completion": 3}])
    (tmp / "mixed").mkdir()
    write_records(tmp / "mixed" / "a.jsonl", "jsonl", [good])
    (tmp / "mixed" / "b.txt").write_text("text")
    (tmp / "bad.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    write_records(tmp / "long.jsonl", "jsonl", [{"prompt": "p" * 200, "completion": "c"}])
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
    cache = tmp_path / "cache"
    prepare = lambda given: _chat(tokenizer_folder, cache, given[0], fmt=given[1], long_examples="drop")  # noqa: E731
    failures = refusals(_bad_examples(tmp_path), prepare, cache)
    assert not failures, "\n".join(failures)
