"""`--float8`: the decoder layers' linear layers multiply in float8, through torchao's Float8Linear.

Each converted linear casts its input and weight to float8 e4m3 (and, in backward, the output's gradient to e5m2)
with one dynamic scale per tensor, recomputed every call, and multiplies with torch._scaled_mm; what it keeps for
backward is the bf16 input and the weight it was given, as nn.Linear does, so activation memory is unchanged. The
embeddings, the norms and lm_head stay in bf16, as torchao and torchtitan recommend (the output projection is where
float8's rounding costs the most loss). A linear whose input or output width is not a multiple of 16, which
_scaled_mm requires, stays as it is.

Under FSDP2 the converted weights are also all-gathered in float8 (torchao's enable_fsdp_float8_all_gather): the
adapter converts before sharding (strategies/fsdp.py). Every other backend gets the plain conversion here, after it
has built the model (recipes/module.py).

Opt-in, never a default: it changes the numerics. `recipe compare --strategies fsdp,fsdp:float8` runs the same
model, data and steps in bf16 and in float8 and reports their losses against FLOAT8_TOLERANCE.
"""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from shardlab.core.errors import UserError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("bf16-mixed", "bf16-true")


def check(precision: str) -> None:
    """Refuse --float8 where it cannot run: outside bf16 precision, or without torchao."""
    if precision not in PRECISIONS:
        raise UserError(f"--float8: needs --precision bf16-mixed or bf16-true around the float8 matmuls "
                        f"(this run is {precision}); give one of those, or drop --float8")
    if importlib.util.find_spec("torchao") is None:
        raise UserError("--float8: the torchao package is not installed; pip install 'shardlab[float8]' or drop --float8")


def _import():
    """torchao.float8 and its Float8Linear (the import's messages are dropped by recipes/ranks.py quiet_libraries)."""
    from torchao import float8
    from torchao.float8.float8_linear import Float8Linear

    return float8, Float8Linear


def _in_layers(module: "torch.nn.Module", fqn: str) -> bool:
    import torch

    return (isinstance(module, torch.nn.Linear) and ".layers." in f".{fqn}"
            and module.in_features % 16 == 0 and module.out_features % 16 == 0)


def convert(model: "torch.nn.Module", fsdp_all_gather: bool = False) -> int:
    """Swap the decoder layers' nn.Linear modules for torchao's Float8Linear, in place; returns how many.
    fsdp_all_gather: their weights become tensors FSDP2 all-gathers in float8 (call before fully_shard)."""
    float8, _ = _import()
    before = count(model)
    config = float8.Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp_all_gather)
    float8.convert_to_float8_training(model, module_filter_fn=_in_layers, config=config)
    converted = count(model) - before
    if converted == 0:
        raise UserError("--float8: no decoder-layer linear of this model has widths that are multiples of 16; "
                        "drop --float8")
    return converted


def count(model: "torch.nn.Module") -> int:
    """How many of the model's modules are torchao Float8Linear (0 without torchao)."""
    if importlib.util.find_spec("torchao") is None:
        return 0
    _, Float8Linear = _import()
    return sum(isinstance(m, Float8Linear) for m in model.modules())
