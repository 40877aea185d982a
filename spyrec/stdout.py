"""Results on standard output, for commands whose stdout is piped into other tools.

A result that cannot be written — the reader closed the pipe (`spyrec inspect OUT | head`), the
disk behind a redirect is full — is a `StdoutError` (exit 2, DESIGN §1), not a traceback, an
internal error, or click's own exit 1 for a closed pipe (1 means a `--check` mismatch here).
A closed pipe is said with no message: the reader has stopped listening on purpose.
"""

from __future__ import annotations

import errno
import os
import sys

import click

from spyrec.errors import SpyrecError


class StdoutError(SpyrecError):
    """Standard output cannot be written; the message is empty for a closed pipe."""


def emit(text: str = "", nl: bool = True) -> None:
    """`click.echo(text)` to stdout, its failure a StdoutError."""
    try:
        click.echo(text, nl=nl)
    except OSError as e:
        raise stdout_error(e) from None


def flush() -> None:
    """Flush stdout (what the command printed and the interpreter would flush at exit)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as e:
        raise stdout_error(e) from None


def stdout_error(e: OSError) -> StdoutError:
    """The StdoutError for `e`, with stdout pointed at /dev/null, so no later write or flush
    (the interpreter's at exit) fails again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    if e.errno == errno.EPIPE:
        return StdoutError("")
    return StdoutError(f"cannot write to standard output ({e.strerror or e}); the results "
                       f"were not delivered")
