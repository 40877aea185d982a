import subprocess
import sys

from spyrec import __version__
from spyrec.cli import main


def test_help_lists_the_program(capsys):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code in (0, None)
    out = capsys.readouterr().out
    assert "compile torch.export programs for IBM Spyre" in out


def test_version_and_bad_command_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "spyrec", "--version"], capture_output=True,
                        text=True)
    assert ok.returncode == 0 and __version__ in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "spyrec", "no-such-command"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "No such command" in bad.stderr
