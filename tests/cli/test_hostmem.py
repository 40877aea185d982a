"""The CLI turns numpy's huge-page advice off (first touch of large arrays 9x faster on hosts
whose THP defrag is `madvise`) unless the user chose with NUMPY_MADVISE_HUGEPAGE."""

import subprocess
import sys

import pytest

PROBE = ("import sys, numpy._core.multiarray as m; from spyrec.cli import main\n"
         "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
         "print(m._get_madvise_hugepage())")


@pytest.mark.parametrize("env, advice", [({}, "False"), ({"NUMPY_MADVISE_HUGEPAGE": "1"}, "True")])
def test_cli_turns_numpys_hugepage_advice_off_unless_the_user_chose(env, advice):
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env={**__import__("os").environ, **env}, check=True).stdout
    assert out.split()[-1] == advice
