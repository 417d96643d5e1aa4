"""Reading a Hugging Face Llama folder's weights: whole, or one tensor (or one rank's rows of it) at a time."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import torch

from shardlab.core.strategy import ModelSource


def model_source(folder: Path) -> ModelSource:
    from transformers import AutoConfig, LlamaForCausalLM

    def load_full() -> torch.nn.Module:
        return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)

    def build_empty() -> torch.nn.Module:
        try:  # transformers >= 5
            from transformers.initialization import no_init_weights
        except ImportError:
            from transformers.modeling_utils import no_init_weights
        with no_init_weights():  # every weight is overwritten from the folder: skip random init
            return LlamaForCausalLM(AutoConfig.from_pretrained(folder))

    def tensors() -> Iterable[tuple[str, torch.Tensor]]:
        from safetensors import safe_open

        for file in sorted(folder.glob("*.safetensors")):
            with safe_open(file, framework="pt") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name).to(torch.float32)

    return ModelSource(folder=str(folder), load_full=load_full, build_empty=build_empty, tensors=tensors)
