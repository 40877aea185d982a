"""The one exception tree for users. `cli.py` maps each class to an exit code (DESIGN §1).

A `SpyrecError` message is shown verbatim: what is wrong, where (op and source line), and what
to do. `assert` is for spyrec's own invariants: if one fires, the bug is ours, never the user's.
"""


class SpyrecError(Exception):
    """Shown to the user verbatim; cli.py picks the exit code."""

    exit_code = 2


class InputFileError(SpyrecError):
    """A bad .pt2, .npz or YAML file."""


class OutputDirError(SpyrecError):
    """An `-o` spyrec may not replace (a file, a directory it did not write) or cannot write."""


class ConfigError(SpyrecError):
    """An unknown pass, option or dim, or a wrong type; the message suggests near names."""


class UnsupportedProgram(SpyrecError):
    """The program uses something spyrec cannot compile; lists *every* offender."""

    exit_code = 3


class SimulatorFault(SpyrecError):
    """Out-of-range address, overlapping allocations, LX overflow, bad gather index."""


class CheckMismatch(SpyrecError):
    """`spyrec run --check`: a simulated output differs from PyTorch eager beyond tolerance."""

    exit_code = 1


class InternalError(SpyrecError):
    """A step failed where spyrec did not expect it to (exit 70): the message names where, so
    a report (or a hand-edited input file) can be traced."""

    exit_code = 70
