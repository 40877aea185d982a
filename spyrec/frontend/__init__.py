"""torch.export front end: load a .pt2, decompose it, lower it to a spyrec Graph."""

from spyrec.frontend.load import load_program
from spyrec.frontend.driver import lower_program

__all__ = ["load_program", "lower_program"]
