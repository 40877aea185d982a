"""`--check` never hides a NaN: NaN/Inf that differ from eager are counted per output, shown
in their own column (and in `run --json`), make the output a mismatch, and turn the max abs /
rel errors into `inf` instead of the largest error among the finite elements."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from spyrec.cli import main
from spyrec.sim.check import compare, format_checks, nonfinite_mismatches
from spyrec.sim.command import run_document
from spyrec.bf16 import float32_to_bf16_bits
from spyrec.sim.files import validator
from tests.programs import Lambda, compile_pt2, export

NAN, INF = np.nan, np.inf


@pytest.mark.parametrize("sim, eager, count", [
    ([NAN, 1.0], [1.0, 1.0], 1),            # NaN where eager is finite (a padding leak)
    ([1.0, 1.0], [NAN, 1.0], 1),            # a value where eager is NaN
    ([INF, 2.0], [1.0, 2.0], 1),            # inf vs finite
    ([1.0, -INF], [1.0, 5.0], 1),
    ([INF, -INF], [-INF, INF], 2),          # +inf vs -inf
    ([INF, NAN], [NAN, INF], 2),            # inf vs NaN, either way round
    ([NAN, INF, -INF, 3.0], [NAN, INF, -INF, 3.0], 0),   # the same non-finite values agree
])
def test_nonfinite_mismatches_are_counted(sim, eager, count):
    assert nonfinite_mismatches(np.array(sim), np.array(eager)) == count
    c = compare(0, "y", "float32", np.array(sim, np.float32), np.array(eager))
    assert c.nonfinite == count
    assert c.ok == (count == 0)
    if count:
        assert c.max_abs == INF and c.max_rel == INF    # never a small finite number


def test_a_nan_next_to_tiny_finite_errors_reports_inf_not_the_finite_error():
    eager = np.array([1.0, 2.0, 3.0])
    c = compare(0, "y", "float32", np.array([1.0, 2.0, NAN], np.float32), eager)
    assert (c.nonfinite, c.mismatches, c.max_abs, c.max_rel, c.ok) == (1, 1, INF, INF, False)
    good = compare(0, "y", "float32", np.array([1.0, 2.0, 3.0], np.float32), eager)
    assert (good.nonfinite, good.max_abs, good.ok) == (0, 0.0, True)


def test_bf16_nan_is_counted():
    values = np.array([1.0, NAN, 3.0], np.float32)
    c = compare(0, "y", "bfloat16", float32_to_bf16_bits(values), np.array([1.0, 2.0, 3.0]))
    assert c.nonfinite == 1 and not c.ok


def test_table_has_a_nan_inf_column():
    checks = [compare(0, "y", "float32", np.array([NAN, INF, 1.0], np.float32),
                      np.array([1.0, 1.0, 1.0])),
              compare(1, "z", "float32", np.ones(3, np.float32), np.ones(3))]
    header, bad, good = format_checks(checks).splitlines()
    assert "nan/inf" in header.split()
    col = header.index("nan/inf") + len("nan/inf")
    assert bad[:col].split()[-1] == "2" and good[:col].split()[-1] == "0"
    assert bad[:col].split()[3:5] == ["inf", "inf"]      # max abs, max rel
    assert bad.endswith("MISMATCH: 2 NaN/Inf differ from eager")
    assert good.endswith("ok")


def test_run_json_counts_nonfinite_and_has_no_infinity():
    checks = [compare(0, "y", "float32", np.array([NAN, 1.0], np.float32), np.ones(2)),
              compare(1, "z", "float32", np.ones(2, np.float32), np.ones(2))]
    manifest = SimpleNamespace(outputs=["y", "z"], mutated_buffers=[])
    result = SimpleNamespace(wall_s=0.1, names=("output_0", "output_1"),
                             output_dtypes=["float32", "float32"],
                             outputs=[np.ones(2, np.float32)] * 2,
                             program=SimpleNamespace(manifest=manifest))
    doc = run_document(result, "o.npz", checks, None)
    text = json.dumps(doc, allow_nan=False)        # strict JSON: no NaN, no Infinity
    validator("run").validate(json.loads(text))
    bad, good = doc["check"]
    assert (bad["ok"], bad["nonfinite_mismatches"], bad["max_abs_err"]) == (False, 1, None)
    assert (good["ok"], good["nonfinite_mismatches"], good["max_abs_err"]) == (True, 0, 0.0)


def test_run_check_fails_on_a_nan_the_simulator_returns(tmp_path, capsys, monkeypatch):
    """End to end: the simulator's output gets one NaN; `run --check` prints the count, exits
    1 and says why; `--json` carries the count."""
    import spyrec.sim.runner as runner

    x = torch.randn(4, 64)
    out = compile_pt2(export(tmp_path, Lambda(lambda m, a: a * 2 + 1), (x,)), tmp_path / "out")
    np.savez(tmp_path / "in.npz", args_0=x.numpy())
    simulate = runner.simulate

    def leaky(*args, **kwargs):
        result = simulate(*args, **kwargs)
        result.outputs[0][1, 3] = np.nan
        return result

    monkeypatch.setattr(runner, "simulate", leaky)
    for extra in ([], ["--json"]):
        try:
            main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "-o",
                  str(tmp_path / "y.npz"), "--check", "-q", *extra])
            code = 0
        except SystemExit as e:
            code = e.code
        stdout, err = capsys.readouterr()
        assert code == 1
        assert err.count("\n") == 1 and "1 NaN/Inf differ" in err, err
        if extra:
            (row,) = json.loads(stdout)["check"]
            assert row["nonfinite_mismatches"] == 1 and row["max_abs_err"] is None
        else:
            assert stdout.splitlines()[1].endswith("MISMATCH: 1 NaN/Inf differ from eager")
