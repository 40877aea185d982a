"""The `spyrec` process exits without the interpreter's teardown (spyrec/cli.py `entry`,
`leave`) and loses nothing a normal exit gives: the status, atexit handlers, buffered output,
and a still-running non-daemon thread's work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from spyrec.cli import _exit_status


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_status_is_the_one_sys_exit_gives():
    assert _exit_status(None) == 0
    assert _exit_status(0) == 0 and _exit_status(3) == 3
    assert _exit_status("a message") == 1


def test_the_process_keeps_its_status_and_messages():
    version = subprocess.run([sys.executable, "-m", "spyrec", "--version"],
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and "spyrec" in version.stdout
    bad = subprocess.run([sys.executable, "-m", "spyrec", "compile", "--bogus"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--bogus" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "spyrec", "compile", "/nonexistent.pt2",
                              "-o", "/nonexistent-dir/out"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "/nonexistent.pt2" in missing.stderr


def test_no_teardown_but_atexit_handlers_run_and_buffered_output_is_flushed(tmp_path):
    mark = tmp_path / "atexit"
    done = _python("""
        import atexit, sys
        from pathlib import Path
        from spyrec.cli import leave
        atexit.register(lambda: Path(sys.argv[1]).write_text("ran"))
        class Held:                   # freed only by the interpreter's teardown
            def __del__(self):
                sys.stderr.write("torn down")
        held = Held()
        print("buffered, no newline", end="")
        leave(3)
        print("never")
        """, str(mark))
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"
    assert mark.read_text() == "ran"
    assert "torn down" not in done.stderr       # the teardown `entry` skips did not run


def test_a_running_non_daemon_thread_finishes_its_work(tmp_path):
    mark = tmp_path / "thread"
    done = _python("""
        import sys, threading, time
        from pathlib import Path
        from spyrec.cli import leave
        def work():
            time.sleep(0.5)
            Path(sys.argv[1]).write_text("written")
        threading.Thread(target=work).start()
        leave(0)
        """, str(mark))
    assert done.returncode == 0
    assert mark.read_text() == "written"


def test_a_closed_output_descriptor_is_no_traceback():
    """Started with stdout closed (`spyrec --version >&-`), Python has no sys.stdout."""
    done = subprocess.run([sys.executable, "-m", "spyrec", "--version"],
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 0
    assert "Traceback" not in done.stderr
