"""The pass registry: snake_case name -> pass class (a frozen dataclass of options)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

PASSES: dict[str, type["Pass"]] = {}


@dataclass
class CompileContext:
    """What passes may read besides the graph (configs) and write besides it (report rows)."""

    layouts_config: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Pass:
    """Base class. Contract (xDSL's): passes may assume a valid graph and must leave one."""

    name: ClassVar[str] = ""

    def run(self, graph, ctx: CompileContext) -> None:
        raise NotImplementedError(type(self).__name__)


def register_pass(name: str):
    def register(cls):
        cls.name = name
        PASSES[name] = cls
        return cls
    return register


def load_all() -> dict[str, type[Pass]]:
    """Import every pass module (registration happens on import)."""
    from spyrec.passes import (  # noqa: F401
        matmul_padding, memory_planning, stick_layout, work_division,
    )

    return PASSES
