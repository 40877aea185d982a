"""The pass registry: snake_case name -> pass class (a frozen dataclass of options).

Each pass also declares a contract: the graph facts it needs, the ones it establishes and the
ones it destroys (a pass that adds ops or buffers leaves them without core splits or addresses).
`pipeline.check_order` walks a configured pipeline with these before anything runs, so a
pipeline in an order that cannot work fails at once with the pass that is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

PASSES: dict[str, type["Pass"]] = {}

# The facts a pass can rely on, and how messages describe them.
FACTS = {
    "layouts": "a device layout for every buffer",
    "core_splits": "core splits for every op",
    "hbm_addresses": "a device-memory address for every buffer",
}

# What code generation reads after the last pass (ops without core splits run on one core).
CODEGEN_REQUIRES = ("layouts", "hbm_addresses")


@dataclass(frozen=True)
class Contract:
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    invalidates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.requires + self.provides + self.invalidates) - set(FACTS)
        assert not unknown, f"unknown facts {unknown}; known: {list(FACTS)}"


# The built-in passes' contracts, read from what each pass module reads and writes (see their
# docstrings). Kept here rather than on the classes so one table shows the whole dependency
# graph; a pass class may still set its own `contract`.
CONTRACTS = {
    # Adds index-check ops and buffers and fuses gathers: runs before layouts exist.
    "gather_coordinates": Contract(invalidates=("layouts", "core_splits", "hbm_addresses")),
    # Lays out every buffer and inserts restickify copies and view copies (new ops, buffers).
    "stick_layout": Contract(provides=("layouts",),
                             invalidates=("core_splits", "hbm_addresses")),
    # Reads operand layouts to find K; adds a padded buffer, a fill and a copy per matmul.
    "matmul_padding": Contract(requires=("layouts",),
                               invalidates=("core_splits", "hbm_addresses")),
    # Reads the output's layout to split whole sticks across cores.
    "work_division": Contract(requires=("layouts",), provides=("core_splits",)),
    # Reads every buffer's device bytes; addresses every buffer that has none.
    "memory_planning": Contract(requires=("layouts",), provides=("hbm_addresses",)),
}


@dataclass
class CompileContext:
    """What passes may read besides the graph (configs) and write besides it (report rows)."""

    layouts_config: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Pass:
    """Base class. Contract (xDSL's): passes may assume a valid graph and must leave one."""

    name: ClassVar[str] = ""
    contract: ClassVar[Contract] = Contract()

    def check_options(self) -> None:
        """Raise ConfigError for option values the types allow but the pass does not (a
        range, a choice). Called when the pipeline is built, before the model is loaded.
        The default runs the pass's `_check_options` if it has one (stick_layout's does)."""
        check = getattr(self, "_check_options", None)
        if check is not None:
            check()

    def run(self, graph, ctx: CompileContext) -> None:
        raise NotImplementedError(type(self).__name__)


def register_pass(name: str):
    def register(cls):
        cls.name = name
        if "contract" not in cls.__dict__ and name in CONTRACTS:
            cls.contract = CONTRACTS[name]
        PASSES[name] = cls
        return cls
    return register


def load_all() -> dict[str, type[Pass]]:
    """Import every pass module (registration happens on import)."""
    from spyrec.passes import (  # noqa: F401
        gather_coordinates, matmul_padding, memory_planning, stick_layout, work_division,
    )

    return PASSES


def providers(fact: str) -> list[str]:
    """Names of the registered passes that establish `fact`, for messages."""
    return sorted(n for n, cls in PASSES.items() if fact in cls.contract.provides)
