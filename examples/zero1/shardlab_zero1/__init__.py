"""DeepSpeed ZeRO-1 for shardlab, as an outside package would write it.

ZeRO-1 shards only the optimizer states: each rank keeps 16-bit parameters and gradients whole.
It reuses shardlab's DeepSpeed adapter (which already runs on CPU and scales the loss once under
gradient accumulation) and adds what the adapter does not know: stage 1's memory model.
"""
from __future__ import annotations

from shardlab.core.memory import ModelStates, Shape, Workload
from shardlab.core.registry import Preset
from shardlab.core.strategy import Capabilities
from shardlab.strategies.deepspeed import ZeRO


class ZeRO1(ZeRO):
    def __init__(self) -> None:
        super().__init__(stage=1)

    def model_state_bytes(self, shape: Shape, work: Workload) -> ModelStates:
        # ZeRO paper (Rajbhandari et al. 2020), P_os: 2 + 2 bytes of 16-bit parameters and gradients on
        # every rank, 12 bytes of fp32 master weights and Adam states split over the world; DeepSpeed's
        # stage-1 optimizer also keeps an fp32 gradient partition (4 bytes, split) during the step.
        n, w = shape.params, work.world_size
        return ModelStates(gpu=4 * n + 16 * n // w, cpu=int(4 * n * work.gpus_per_node * 1.5), step_only=4 * n // w)


def presets() -> list[Preset]:
    return [Preset(name="zero1", strategy_cls=ZeRO1, family="zero1",
                   description="DeepSpeed ZeRO-1: optimizer states sharded (plug-in example)",
                   capabilities=Capabilities(shards_optimizer=True))]
