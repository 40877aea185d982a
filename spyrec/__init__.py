"""spyrec: an ahead-of-time compiler and functional simulator for IBM's Spyre accelerator.

`spyrec.compile(...)`, `spyrec.run(...)` and `spyrec.Session(OUT)` (state kept between calls,
`spyrec/session.py`) are the Python API (spyrec/api.py), loaded on first use: `import spyrec`
itself imports nothing heavy (tests/cli/test_startup.py).
"""

__version__ = "0.1.0"

__all__ = ["__version__", "compile", "run", "Session"]


def __getattr__(name: str):
    if name in ("compile", "run"):
        from spyrec import api

        return getattr(api, name)
    if name == "Session":
        from spyrec.session import Session

        return Session
    raise AttributeError(f"module 'spyrec' has no attribute {name!r}")
