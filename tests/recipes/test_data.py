import json

import pytest
import torch

from shardlab.core.errors import UserError
from shardlab.recipes import data
from shardlab.recipes.model import byte_tokenizer


def test_embedded_corpus_is_real_text():
    text = data.embedded_corpus()
    assert len(text) > 100_000 and "assignment" in text.lower()


def test_folder_of_text_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "world"}) + "\n\n" + json.dumps({"text": "again"}))
    (tmp_path / "ignored.bin").write_bytes(b"\0")
    assert data.read_texts(str(tmp_path)) == ["hello", "world", "again"]


def test_jsonl_without_text_field(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"content": "x"}))
    with pytest.raises(UserError, match="line 1 has no string 'text' field"):
        data.read_texts(str(tmp_path / "x.jsonl"))


def test_blocks_are_eos_joined_and_fixed_length():
    tok = byte_tokenizer()
    blocks = data.token_blocks(["ab", "cd"], tok, seq_len=3)
    assert blocks.shape == (2, 3)
    assert blocks.flatten().tolist() == tok("ab")["input_ids"] + [tok.eos_token_id] + tok("cd")["input_ids"] + [tok.eos_token_id]
