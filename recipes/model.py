"""The model side of the recipe: shipped shapes, a model's config, and the initial-weights folder.

Shipped shapes are `recipes/configs/models/NAME.json`: the published config.json values of each model
(TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T, meta-llama/Llama-2-{7,13,70}b-hf,
meta-llama/Llama-3.1-{8,70,405}B, meta-llama/Llama-3.2-{1,3}B on the Hugging Face hub), two tiny test
shapes, and the older names (`alias_of`), kept with the values shardlab shipped under them so that their
cached weights and measurements stay valid. Built with random weights, every shape gets the byte-level
tokenizer below (bos 0, eos 1, pad 1), whatever ids the published model uses.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from shardlab.core.errors import UserError

# Keys of a shipped file that are not LlamaConfig arguments.
_META_KEYS = ("model_type", "alias_of", "default_seq_len")  # default_seq_len: the recipe's, for test shapes
# What a config must give: LlamaConfig would silently fill each with Llama-7B's value.
REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def _read_shapes() -> dict[str, dict]:
    folder = resources.files("shardlab.recipes").joinpath("configs/models")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
    return {f.name[: -len(".json")]: json.loads(f.read_text()) for f in files}


SHAPES: dict[str, dict] = _read_shapes()
"""name -> the shipped file's contents."""
SHIPPED: dict[str, dict] = {name: {k: v for k, v in d.items() if k not in _META_KEYS} for name, d in SHAPES.items()}
"""name -> the LlamaConfig arguments that name builds."""
ALIASES: dict[str, str] = {name: d["alias_of"] for name, d in SHAPES.items() if "alias_of" in d}
"""older name -> the shape it stands for (same architecture and parameter count)."""


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
    """The Hugging Face folder every strategy starts from: a user's folder, or a shipped shape built once per seed."""
    if model not in SHIPPED:
        return check_llama_folder(model)
    spec = SHIPPED[model]
    key = hashlib.sha256(json.dumps([spec, seed], sort_keys=True).encode()).hexdigest()[:12]

    def write(tmp: Path) -> None:  # once per shape and seed: the model class (seconds to import) only then
        import torch
        from transformers import LlamaForCausalLM

        torch.manual_seed(seed)
        built = LlamaForCausalLM(model_config(model))
        built.tie_weights()  # tied shapes share one matrix (and save it once)
        built.save_pretrained(tmp)
        byte_tokenizer().save_pretrained(tmp)

    return _atomic_folder(cache_dir() / "init" / f"{model}-seed{seed}-{key}", write)


def model_config(model: str):
    """The model's transformers config, without weights: a shipped name, a local folder's config.json, or a config.json."""
    from transformers import LlamaConfig

    if model in SHIPPED:
        return LlamaConfig(**SHIPPED[model], bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return LlamaConfig.from_dict(read_llama_config(model))


# LlamaConfig's defaults for the sizes a config.json may leave out (tests/recipes/test_startup.py checks them against
# transformers'): what llama_fields fills, as LlamaConfig would.
LLAMA_DEFAULTS = {"num_key_value_heads": None, "head_dim": None, "max_position_embeddings": 2048,
                  "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}


def llama_fields(model: str) -> dict:
    """The model's config as plain values, without transformers (seconds to import): what `recipe plan` and the
    memory estimate read (core/memory.py LLAMA_FIELDS, max_position_embeddings), filled as LlamaConfig fills them."""
    fields = {**LLAMA_DEFAULTS, **(SHIPPED[model] if model in SHIPPED else read_llama_config(model))}
    if fields["num_key_value_heads"] is None:  # multi-head attention: one KV head per query head
        fields["num_key_value_heads"] = fields["num_attention_heads"]
    if fields["head_dim"] is None:
        fields["head_dim"] = fields["hidden_size"] // fields["num_attention_heads"]
    return fields


def read_llama_config(path: str) -> dict:
    """The checked contents of a folder's config.json, or of a .json file: a Llama config with its shape given."""
    given = Path(path)
    if not given.exists():
        known = sorted(SHIPPED, key=lambda name: (name in ALIASES, name))
        raise UserError(f"--model {path}: neither a shipped model nor an existing path; known: {', '.join(known)} "
                        f"(`recipe models`), or a local Hugging Face Llama folder or its config.json")
    if given.is_file() and given.suffix != ".json":
        raise UserError(f"--model {path}: is a file, not a model folder or config.json; give a shipped name (`recipe "
                        f"models`), or a Hugging Face Llama folder (config.json, *.safetensors, tokenizer)")
    file = given / "config.json" if given.is_dir() else given
    try:
        cfg = json.loads(file.read_text())
    except (OSError, ValueError):
        raise UserError(f"--model {path}: no readable config.json; is this a Hugging Face model folder?") from None
    if not isinstance(cfg, dict) or cfg.get("model_type") != "llama":
        kind = cfg.get("model_type") if isinstance(cfg, dict) else None
        raise UserError(f"--model {path}: model_type is {kind!r}, shardlab's recipe trains Llama models")
    missing = [k for k in REQUIRED if k not in cfg]
    if missing:
        raise UserError(f"--model {path}: {file.name} lacks {', '.join(missing)}; a Llama config needs {', '.join(REQUIRED)}")
    return cfg


def check_llama_folder(path: str) -> Path:
    """A folder `recipe run` can train from: a Llama config.json, weights and a tokenizer."""
    read_llama_config(path)
    folder = Path(path)
    plan = f"`recipe plan --model {path}` works without them"
    if not folder.is_dir():
        raise UserError(f"--model {path}: a config.json has no weights: training needs a Llama folder with weights "
                        f"and a tokenizer ({plan})")
    if not (list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))):
        raise UserError(f"--model {path}: no weight files (*.safetensors) in the folder: training needs weights ({plan})")
    if not ((folder / "tokenizer.json").exists() or (folder / "tokenizer.model").exists()):
        raise UserError(f"--model {path}: no tokenizer (tokenizer.json or tokenizer.model) in the folder")
    return folder


def flops_per_token(config, seq_len: int) -> float:
    """Training FLOPs per token: 6N + 12·L·H·Q·S (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's estimate_mfu).

    N counts unique parameters (a tied embedding once, as memory.shape_of does); H·Q is heads x head_dim,
    the width of the attention (q and o are hidden x H·Q, k and v hidden x kv_heads·Q)."""
    h, L, v, i = config.hidden_size, config.num_hidden_layers, config.vocab_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q, kv = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * i + 2 * h  # q,o + k,v + MLP + 2 norms
    if getattr(config, "attention_bias", False):
        per_layer += q + 2 * kv + h
    if getattr(config, "mlp_bias", False):
        per_layer += 2 * i + h
    embeddings = (1 if config.tie_word_embeddings else 2) * v * h  # embeddings and lm_head, one matrix when tied
    n = L * per_layer + embeddings + h  # + final norm
    return 6 * n + 12 * L * q * seq_len
