"""Lightning's ModelParallelStrategy for FSDP2 with CPU offload: the sharded parameters stay on the CPU.

Its own module so that strategies/fsdp.py (presets, memory model) loads without Lightning: `recipe plan`
and `recipe strategies` never import it; `FSDP2.lightning_strategy` does, when a run starts.
"""
from __future__ import annotations

from lightning.pytorch.strategies import ModelParallelStrategy


class _OffloadingModelParallel(ModelParallelStrategy):
    """Lightning's ModelParallelStrategy moves the whole module to the GPU after `configure_model`;
    with FSDP2's CPUOffloadPolicy the sharded parameters must stay on CPU (FSDP copies them in per
    use), so only the buffers (rotary inv_freq) move."""

    def model_to_device(self) -> None:
        for module in self.model.modules():
            for name, buf in module._buffers.items():
                if buf is not None:
                    module._buffers[name] = buf.to(self.root_device)
