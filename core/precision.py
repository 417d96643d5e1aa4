"""Lightning precision strings, parsed in one place: which one a run gets, and what each means in dtypes."""
from __future__ import annotations

from shardlab.core.errors import UserError

# precision -> (compute dtype, storage dtype of plain parameters, bytes of a compute value)
TABLE: dict[str, tuple[str, str, int]] = {
    "32-true": ("fp32", "fp32", 4),
    "bf16-mixed": ("bf16", "fp32", 2),
    "bf16-true": ("bf16", "bf16", 2),
    "16-mixed": ("fp16", "fp32", 2),
}


def resolve(precision: str, accelerator: str, bf16: bool) -> str:
    """`auto` -> bf16-mixed on a GPU with bf16, else 32-true; a precision the device cannot run is refused."""
    if precision == "auto":
        return "bf16-mixed" if accelerator == "gpu" and bf16 else "32-true"
    if accelerator == "cpu" and precision.startswith("16"):
        raise UserError(f"--precision {precision}: fp16 training needs a GPU; on CPU use 32-true or bf16-mixed")
    if accelerator == "gpu" and precision.startswith("bf16") and not bf16:
        raise UserError(f"--precision {precision}: this GPU has no bf16; use 16-mixed or 32-true")
    return precision


def dtype_name(precision: str, part: str) -> str:
    """`part` is "compute" (what matmuls see) or "storage" (plain parameters) -> fp32, bf16 or fp16."""
    compute, storage, _ = TABLE[precision]
    return compute if part == "compute" else storage


def half(precision: str) -> str | None:
    """The 16-bit dtype a precision computes in, or None for 32-true."""
    compute = TABLE[precision][0]
    return None if compute == "fp32" else compute


def compute_bytes(precision: str) -> int:
    return TABLE[precision][2]
