"""spyrec: an ahead-of-time compiler and functional simulator for IBM's Spyre accelerator."""

__version__ = "0.1.0"
