"""A package whose public names live in private modules and are imported on first use (PEP 562's
module __getattr__): costmodel and search use it, so that a command importing one name does not
import every module, and numpy or optuna with it."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]], namespace: dict):
    """(__getattr__, __dir__, module_of) for ``package``: ``exports`` maps a private module to the
    names it defines; a name is imported when first asked for and then kept in ``namespace`` (the
    package's globals), so later look-ups do not reach __getattr__."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name in module_of:
            value = getattr(importlib.import_module(module_of[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*namespace, *module_of])

    return __getattr__, __dir__, module_of
