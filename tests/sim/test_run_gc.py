"""`spyrec run` (and `spyrec.run`, `inspect`) loads and simulates with the cyclic collector's automatic collections off
(spyrec/hostmem.py `no_automatic_collections`: a Granite-8B-width d8 prefill spent 4% of its
wall in 551 collections that freed nothing), and gives the caller's setting back."""

import gc

import numpy as np
import torch

import spyrec
import spyrec.sim.directory as directory
import spyrec.sim.runner as runner
from tests.programs import Lambda


def test_simulate_runs_without_automatic_collections_and_restores_them(tmp_path, monkeypatch):
    seen, loading = [], []
    real, real_verify = runner.run_op, directory.verify_program

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    def verifying(program):
        loading.append(gc.isenabled())
        return real_verify(program)

    monkeypatch.setattr(runner, "run_op", recording)
    monkeypatch.setattr(directory, "verify_program", verifying)
    x = torch.randn(4, 64)
    ep = torch.export.export(Lambda(lambda m, x: x * 2 + 1).eval(), (x,))
    out = spyrec.compile(ep, tmp_path / "out")
    assert gc.isenabled()
    result = runner.simulate(out, {"args_0": x.numpy()})
    assert seen and not any(seen) and gc.isenabled()
    assert loading == [False]                   # load_output_dir pauses it too
    directory.load_output_dir(out)
    assert loading == [False, False] and gc.isenabled()
    np.testing.assert_array_equal(result.outputs[0], (x * 2 + 1).numpy())

    gc.disable()            # a caller that runs without collections keeps it that way
    try:
        runner.simulate(out, {"args_0": x.numpy()})
        assert not gc.isenabled()
    finally:
        gc.enable()
