"""The model side of the recipe: shipped configs, the initial-weights folder, and how to load it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from shardlab.core.errors import UserError

# Shipped architectures, built with random weights from the run's seed.
SHIPPED: dict[str, dict] = {
    "tiny": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=320, max_position_embeddings=2048),
    # TinyLlama-1.1B's shape.
    "llama-1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
    # Llama-2 shapes, for planning (running them builds random weights of that size).
    "llama-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096),
    "llama-13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                      num_key_value_heads=40, vocab_size=32000, max_position_embeddings=4096),
    "llama-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                      num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096),
}


def cache_dir() -> Path:
    return Path(os.environ.get("SHARDLAB_CACHE", Path.home() / ".cache" / "shardlab"))


def byte_tokenizer():
    """A byte-level tokenizer (256 bytes + <s>, </s>) for the shipped configs: no hub needed."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([], vocab_size=258, special_tokens=["<s>", "</s>"], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<s>", eos_token="</s>", pad_token="</s>")


def _atomic_folder(final: Path, write) -> Path:
    """Write a folder under a temporary name and rename it into place; a finished one is reused."""
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        write(tmp)
        (tmp / ".complete").touch()
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished first: theirs is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def initial_folder(model: str, seed: int) -> Path:
    """The Hugging Face folder every strategy starts from: a user's folder, or a shipped config built once per seed."""
    if model not in SHIPPED:
        return check_llama_folder(model)
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = SHIPPED[model]
    key = hashlib.sha256(json.dumps([spec, seed], sort_keys=True).encode()).hexdigest()[:12]

    def write(tmp: Path) -> None:
        torch.manual_seed(seed)
        LlamaForCausalLM(model_config(model)).save_pretrained(tmp)
        byte_tokenizer().save_pretrained(tmp)

    return _atomic_folder(cache_dir() / "init" / f"{model}-seed{seed}-{key}", write)


def model_config(model: str):
    """The model's transformers config, without weights: a shipped shape or a local folder's config.json."""
    from transformers import AutoConfig, LlamaConfig

    if model in SHIPPED:
        return LlamaConfig(**SHIPPED[model], bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return AutoConfig.from_pretrained(check_llama_folder(model))


def check_llama_folder(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"--model {path}: no such folder; give one of {', '.join(SHIPPED)} or a local Hugging Face Llama folder")
    cfg_file = folder / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError):
        raise UserError(f"--model {path}: no readable config.json; is this a Hugging Face model folder?") from None
    if cfg.get("model_type") != "llama":
        raise UserError(f"--model {path}: model_type is {cfg.get('model_type')!r}, shardlab's recipe trains Llama models")
    if not (list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))):
        raise UserError(f"--model {path}: no weight files (*.safetensors) in the folder")
    if not ((folder / "tokenizer.json").exists() or (folder / "tokenizer.model").exists()):
        raise UserError(f"--model {path}: no tokenizer (tokenizer.json or tokenizer.model) in the folder")
    return folder


def flops_per_token(config, seq_len: int) -> float:
    """Training FLOPs per token: 6N + 12·L·d·S (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's estimate_mfu)."""
    h, L, v, i = config.hidden_size, config.num_hidden_layers, config.vocab_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h  # q,o + k,v + MLP + 2 norms
    n = L * per_layer + 2 * v * h + h  # + embeddings, lm_head, final norm
    return 6 * n + 12 * L * h * seq_len
