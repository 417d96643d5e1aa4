"""Built-in strategy adapters: each module lists its presets; the registry (core/registry.py) collects them."""
from shardlab.strategies import ddp, deepspeed, fsdp

BUILT_IN = [*ddp.PRESETS, *deepspeed.PRESETS, *fsdp.PRESETS]
