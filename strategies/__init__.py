"""Built-in strategy adapters; importing this package registers their presets."""
from shardlab.strategies import ddp, deepspeed, fsdp  # noqa: F401
