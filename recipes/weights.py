"""Reading a Hugging Face Llama folder's weights: whole, or one tensor (or one rank's rows of it) at a time.

Sharded strategies never need the whole model in one process: ZeRO-3 has rank 0 read one tensor at a time
and DeepSpeed scatter it; FSDP2 builds the model on the meta device and each rank reads only its own rows
of each tensor (safetensors reads a slice without loading the rest), as torchtitan and Accelerate's
`cpu_ram_efficient_loading` do.
"""
from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

import torch

from shardlab.core.errors import UserError
from shardlab.core.strategy import ModelSource


def _index(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (the sharded index, or every file's header)."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        return {name: folder / file for name, file in json.loads(index.read_text())["weight_map"].items()}
    from safetensors import safe_open

    found: dict[str, Path] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            found.update({name: file for name in f.keys()})
    return found


def tie(model: torch.nn.Module) -> torch.nn.Module:
    """Share embed_tokens and lm_head where the config says so. transformers 5 leaves a model built under
    no_init_weights or on the meta device untied: lm_head would be a second, independent matrix."""
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
        assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def build_empty(config, meta: bool = False) -> torch.nn.Module:
    """The architecture with its weights left uninitialised (meta=True: parameters on the meta device)."""
    from accelerate import init_empty_weights
    from transformers import LlamaForCausalLM

    try:  # transformers >= 5
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights
    with ExitStack() as stack:
        stack.enter_context(no_init_weights())  # every weight is overwritten from the folder: skip random init
        if meta:
            stack.enter_context(init_empty_weights(include_buffers=False))
        model = LlamaForCausalLM(config)
    return tie(model)  # outside no_init_weights, which turns tie_weights into a no-op


def model_source(folder: Path) -> ModelSource:
    from transformers import AutoConfig, LlamaForCausalLM

    folder = Path(folder)
    files: dict[str, Path] = {}

    def load_full() -> torch.nn.Module:
        return tie(LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32))

    def read(name: str, rows: Optional[tuple[int, int]] = None) -> torch.Tensor:
        from safetensors import safe_open

        if not files:
            files.update(_index(folder))
        with safe_open(files[name], framework="pt") as f:
            tensor = f.get_slice(name)[rows[0]:rows[1]] if rows else f.get_tensor(name)
        return tensor.to(torch.float32)

    return ModelSource(folder=str(folder), load_full=load_full,
                       build_empty=lambda meta=False: build_empty(AutoConfig.from_pretrained(folder), meta),
                       read=read)


def check_weights(folder: Path, config, flag: str = "--model") -> None:
    """Before any process starts: every parameter the config implies is in the safetensors files, with its
    shape. One line naming the first disagreement (a config.json that does not belong to these weights)."""
    from safetensors import safe_open

    files = _index(folder)
    if not files:
        raise UserError(f"{flag} {folder}: no *.safetensors weights; shardlab reads safetensors "
                        f"(convert with transformers: model.save_pretrained(folder, safe_serialization=True))")
    expected = {name: tuple(p.shape) for name, p in build_empty(config, meta=True).named_parameters()}
    for name, shape in expected.items():
        if name not in files:
            raise UserError(f"{flag} {folder}: the weights have no {name}, which the config.json implies; "
                            f"the config does not belong to these weights")
        with safe_open(files[name], framework="pt") as f:
            found = tuple(f.get_slice(name).get_shape())
        if found != shape:
            raise UserError(f"{flag} {folder}: {name} is {list(found)} in the weights but the config.json says "
                            f"{list(shape)}; the config does not belong to these weights")
