"""Command line: thin click commands over the library (DESIGN §1).

User errors (`SpyrecError`) print one message and exit with the class's code; anything else is
a bug in spyrec and keeps its traceback.
"""

from __future__ import annotations

import sys

import click

from spyrec import __version__
from spyrec.errors import SpyrecError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="spyrec")
def cli() -> None:
    """spyrec: compile torch.export programs for IBM Spyre and simulate them.

    \b
    Commands arrive in this order: compile (a .pt2 into an output directory),
    run (simulate an output directory against inputs), inspect (layouts, plan, cost).
    """


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="spyrec", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except SpyrecError as e:
        click.echo(f"spyrec: {e}", err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
