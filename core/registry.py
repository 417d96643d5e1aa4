"""Named strategy presets: name -> (Strategy class, preset kwargs, description, capabilities).

Modelled on Lightning's strategy registry; each backend module registers its own presets. What
Lightning lacks: third-party packages add presets through the entry-point group `shardlab.strategies`
(a callable returning Presets), and a broken plug-in is reported by name without breaking the rest.
"""
from __future__ import annotations

import inspect
from importlib import metadata
from typing import Any, Callable, Iterable, Optional

from shardlab.core.errors import UserError
from shardlab.core.strategy import Capabilities, Offload, Preset, Strategy  # noqa: F401  (plug-ins import Preset from here)

ENTRY_POINT_GROUP = "shardlab.strategies"


_PRESETS: dict[str, Preset] = {}
_BROKEN: dict[str, str] = {}
_discovered = False


def _check(preset: Any) -> Preset:
    if not isinstance(preset, Preset):
        raise TypeError(f"expected a shardlab Preset, got {type(preset).__name__}")
    cls = preset.strategy_cls
    if not (inspect.isclass(cls) and issubclass(cls, Strategy)):
        raise TypeError(f"preset '{preset.name}': strategy_cls must subclass shardlab's Strategy")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(f"preset '{preset.name}': {cls.__name__} does not implement {missing}")
    if preset.name in _PRESETS or preset.name == "auto":
        raise ValueError(f"preset '{preset.name}' is already registered (by {_PRESETS[preset.name].source})"
                         if preset.name in _PRESETS else "'auto' is reserved for the selector")
    return preset


def register(preset: Preset) -> Preset:
    """Register one preset in this process (built-ins, tests, notebooks)."""
    _PRESETS[preset.name] = _check(preset)
    return preset


def strategy(name: str, description: str, capabilities: Capabilities = Capabilities(), family: Optional[str] = None,
             **kwargs: Any) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator: register a Strategy subclass as a preset in this process."""
    def wrap(cls: type[Strategy]) -> type[Strategy]:
        register(Preset(name=name, strategy_cls=cls, description=description, capabilities=capabilities,
                        family=family or name, kwargs=kwargs, source="in-process"))
        return cls
    return wrap


def _discover() -> None:
    """Load every `shardlab.strategies` entry point once; record failures instead of raising."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    from shardlab.strategies import BUILT_IN

    for p in BUILT_IN:
        if p.name not in _PRESETS:
            register(p)

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist else "?"
        try:
            loaded = ep.load()
            presets: Iterable[Preset] = loaded() if callable(loaded) else loaded
            checked = []
            for p in presets:
                p = _check(p)
                if any(p.name == c.name for c in checked):
                    raise ValueError(f"preset '{p.name}' is listed twice")
                checked.append(p)
            for p in checked:
                _PRESETS[p.name] = Preset(**{**p.__dict__, "source": f"plugin:{dist}"})
        except Exception as e:  # a broken plug-in must not break the others
            _BROKEN[f"{ep.name} ({dist})"] = f"{type(e).__name__}: {e}"


def presets() -> dict[str, Preset]:
    _discover()
    return dict(_PRESETS)


def broken() -> dict[str, str]:
    """Plug-ins that failed to load: entry point (distribution) -> error."""
    _discover()
    return dict(_BROKEN)


def get(name: str) -> Preset:
    known = presets()
    if name not in known:
        hint = f"; broken plug-ins: {', '.join(broken())}" if broken() else ""
        raise UserError(f"--strategy {name}: unknown strategy; known: {', '.join(sorted(known))}{hint}")
    return known[name]


def native_config_reader(kind: str) -> type[Strategy]:
    """The strategy class that reads a backend's own config file (`deepspeed`: --deepspeed-config)."""
    for p in presets().values():
        if p.capabilities.native_config == kind:
            return p.strategy_cls
    raise UserError(f"--{kind}-config: no installed strategy reads {kind} config files")


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
