"""`weights.bin` written while the last passes run.

Writing the weights is most of a big compile (Llama-3.2-1B: ~11 s of 20; Granite-8B width at
16 layers: ~28 s of 40), and it depends only on the constants: which buffers are constants,
their layouts and their values. Only the passes whose registry
contract declares `constants` may change those (`ir/writes.py`; the verifying instrument holds
every pass to it); in the default pipeline they are `stick_layout` and `split_padding`. So the
compiler plans the blob after the first of them and writes it on background threads (numpy's
copies and the kernel's writes release the GIL) into a temporary directory beside the output,
while coarse tiling, work division, staging, LX and HBM planning, code generation and the cost
estimate run; after each later one it plans again (`replan`), and a changed plan rewrites only
the tensors that moved or changed (most programs: none; Llama-3.2-1B starts writing ~2 s
sooner than after split_padding). Code generation takes the finished file instead of writing it
again.

Correct by construction twice over: code generation plans the blob again from the final graph
and takes the early file only when both were planned from the same constants
(`WeightsBlob.key`, the state the contract check compares: every constant buffer in order,
its host size and dtype, its layout and its value); otherwise it writes the file as before.
Nothing is half-written: a compile that fails, or is interrupted, stops the writer between two
pieces (of ~16 MB) and removes its directory; a killed one leaves a temporary that the next
compile to the same output removes (`outdir.remove_stale_temporaries`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from spyrec.codegen.weights_file import (
    WEIGHTS_FILE, WeightsBlob, WeightsStopped, background_priority, entry_identity,
)
from spyrec.outdir import new_temporary, remove_tree


class WeightsJob:
    """One `weights.bin`, planned from `graph` now and written on a daemon thread into a new
    temporary directory beside `target` (the output directory's real path); `replan` when a
    later pass may have changed the constants."""

    def __init__(self, graph, target: Path):
        self.blob = WeightsBlob.plan(graph)
        self._dir = new_temporary(target)
        self.left: list[str] = []       # its directory, when it could not be removed
        self._path = self._dir / WEIGHTS_FILE
        # entry identities (`weights_file.entry_identity`) of the current plan whose bytes are
        # in the file, with those bytes' SHA-256; their ids name values the plan holds
        # (`WeightsBlob` keeps them)
        self._written: dict[tuple, str] = {}
        self._start(frozenset(), reuse=False)

    def _start(self, skip: frozenset, reuse: bool) -> None:
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(self.blob, skip, reuse, self._stop), daemon=True,
            name="spyrec-weights")
        self._thread.start()

    def _run(self, blob: WeightsBlob, skip: frozenset, reuse: bool,
             stop: threading.Event) -> None:
        background_priority()
        try:
            blob.write(self._path, stop, skip=skip, done=self._written.__setitem__,
                       reuse=reuse)
        except WeightsStopped:
            pass
        except BaseException as e:      # re-raised by `take`, where the file is needed
            self._error = e

    def replan(self, graph) -> bool:
        """Plan the blob again from `graph` (a pass that may write constants has run since
        the job started); True if the plan changed. The writer then stops between two
        pieces (a few ms) and starts over on the new plan in the same file, leaving the
        tensors it wholly wrote that the new plan holds at the same place alike: a pass
        that pads one weight costs that weight and the ones after it, not the whole file.
        A failure of the old plan's writer is dropped: the new plan meets its own."""
        blob = WeightsBlob.plan(graph)   # while the old plan holds its values: ids unambiguous
        if blob.key == self.blob.key:
            return False
        self._stop.set()
        self._thread.join()
        # only the new plan's own entries stay known as written: another entry's bytes may
        # be where the new plan writes (a third plan must not take them for its own)
        kept = {entry_identity(*entry) for entry in blob.entries}
        self._written = {k: v for k, v in self._written.items() if k in kept}
        self.blob = blob
        self._start(frozenset(self._written), reuse=True)
        return True

    def take(self, blob: WeightsBlob, path: Path) -> dict[str, str] | None:
        """Move the finished file to `path` if it holds `blob` (planned from the final graph)
        and return each stored tensor's SHA-256 by name; None, with the early file removed,
        if the plans differ. A failure of the writer (a constant that cannot be laid out, a
        full disk) is raised here, as writing it now would have raised it."""
        if blob.key != self.blob.key:
            self.discard()
            return None
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            self.discard()
            raise error
        os.rename(self._path, path)
        self.discard()
        return {entry[0].name: self._written[entry_identity(*entry)]
                for entry in blob.entries}

    def discard(self) -> None:
        """Stop the writer (between two pieces), wait for it and remove its directory."""
        self._stop.set()
        self._thread.join()
        problem = remove_tree(self._dir)
        if problem:
            self.left.append(problem)
