"""Named strategy presets: name -> (Strategy class, preset kwargs, description, capabilities).

Modelled on Lightning's strategy registry; each backend module registers its own presets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardlab.core.errors import UserError
from shardlab.core.strategy import Capabilities, Offload, Strategy


@dataclass(frozen=True)
class Preset:
    name: str
    strategy_cls: type[Strategy]
    description: str
    capabilities: Capabilities
    family: str
    """Presets of one family differ only in what they offload (`zero3`, `zero3_offload`, ...)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    source: str = "built-in"

    def build(self) -> Strategy:
        strategy = self.strategy_cls(**self.kwargs)
        strategy.name, strategy.description, strategy.capabilities = self.name, self.description, self.capabilities
        return strategy


_PRESETS: dict[str, Preset] = {}


def register(preset: Preset) -> Preset:
    if preset.name in _PRESETS:
        raise ValueError(f"strategy preset '{preset.name}' is already registered")
    _PRESETS[preset.name] = preset
    return preset


def _load_builtins() -> None:
    import shardlab.strategies  # noqa: F401  (each backend module registers its presets on import)


def presets() -> dict[str, Preset]:
    _load_builtins()
    return dict(_PRESETS)


def get(name: str) -> Preset:
    known = presets()
    if name not in known:
        raise UserError(f"--strategy {name}: unknown strategy; known: {', '.join(sorted(known))}")
    return known[name]


def with_offload(preset: Preset, offload: Offload | None) -> Preset:
    """The preset of the same family that offloads `offload`; an error if the family has none."""
    if offload is None or offload == preset.capabilities.offload:
        return preset
    family = [p for p in presets().values() if p.family == preset.family]
    for candidate in family:
        if candidate.capabilities.offload == offload:
            return candidate
    offloading = sorted(p.name for p in presets().values() if p.capabilities.offload == offload)
    raise UserError(
        f"--offload {offload}: strategy '{preset.name}' has no such CPU offload; "
        f"use one of {', '.join(offloading) or '(none registered)'}"
    )
