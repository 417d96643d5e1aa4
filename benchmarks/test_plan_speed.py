"""pytest-benchmark: planning a 70B Llama takes under 2 s on the CI CPU (meta device, no weights)."""
from __future__ import annotations

from shardlab.core.config import RunConfig
from shardlab.core.memory import _shape_of
from shardlab.recipes.plan import plan


def test_plan_70b_latency(benchmark):
    cfg = RunConfig(model="llama-70b", accelerator="gpu", precision="bf16-mixed", micro_batch_size=1, seq_len=2048,
                    gpus=8, gpu_memory_gib=80, cpu_memory_gib=2048)

    def plan_cold():
        _shape_of.cache_clear()  # count the meta-device build every time
        return plan(cfg)

    # one warm-up round pays the one-off imports (transformers' Llama module, accelerate)
    run = benchmark.pedantic(plan_cold, rounds=3, iterations=1, warmup_rounds=1)
    assert run.auto["choice"]
    assert benchmark.stats.stats.median < 2.0
