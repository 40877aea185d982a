"""`--set cost.NAME=VALUE` (DESIGN §1): a cost-model parameter for planning and estimates alike,
checked like a pass option; and every trial a tiling plans (`plan/trials.py`) plans with the
pipeline's configured options, not the defaults."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import spyrec.plan.trials as trials
from spyrec.costmodel import DEFAULT_PARAMS
from spyrec.errors import ConfigError
from spyrec.passes.pipeline import cost_overrides, cost_params
from spyrec.sim.runner import cost_for_directory
from tests.programs import Lambda, compile_pt2, export, load_json


@pytest.mark.parametrize("text, message", [
    ("cost.core_bytes_per_sec=1e9", r"no parameter 'core_bytes_per_sec' \(did you mean "
                                    r"'core_bytes_per_s'\?\); parameters: cores, "),
    ("cost.core_bytes_per_s=fast", r"cost.core_bytes_per_s must be a finite float, got 'fast'"),
    ("cost.core_bytes_per_s=-1e9", r"cost.core_bytes_per_s must be above 0"),
    ("cost.core_bytes_per_s=.inf", r"must be a finite float"),
    ("cost.cores=64", r"cost.cores must be between 1 and 32, got 64"),
    ("cost.cores=2.5", r"cost.cores must be a finite int"),
    ("cost.op_overhead_us=-1", r"cost.op_overhead_us must be at least 0"),
    ("cost.clock_hz=0", r"cost.clock_hz must be above 0, got 0"),
    ("cost.broadcast_cohort", r"the cost model has no parameter 'broadcast_cohort'"),
    ("cost.unit_overlap=1.5", r"cost.unit_overlap must be between 0 and 1, got 1.5"),
    ("cost.unit_overlap=-0.1", r"cost.unit_overlap must be between 0 and 1"),
    ("cost.unit_overlap=half", r"cost.unit_overlap must be a finite float"),
])
def test_a_bad_cost_parameter_is_one_message(text, message):
    with pytest.raises(ConfigError, match=message):
        cost_params([text])


def test_cost_parameters_are_read_as_their_type_and_only_changes_are_recorded():
    params = cost_params(["cost.core_bytes_per_s=9e9", "cost.cores=16",
                          "stick_layout.beam_width=8", "cost.op_overhead_us=0",
                          "cost.bundle_overhead_us=0"])
    assert (params.core_bytes_per_s, params.cores) == (9e9, 16)
    assert isinstance(params.core_bytes_per_s, float) and isinstance(params.cores, int)
    assert cost_overrides(params) == {"core_bytes_per_s": 9e9, "cores": 16,
                                      "bundle_overhead_us": 0.0}
    assert cost_params([]) == DEFAULT_PARAMS and cost_overrides(DEFAULT_PARAMS) == {}
    # a fraction: both ends allowed, 0 (serialized units) as much as 1
    assert cost_params(["cost.unit_overlap=0"]).unit_overlap == 0.0
    assert cost_params(["cost.unit_overlap=1"]).unit_overlap == 1.0


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cost")
    module = Lambda(lambda m, x: torch.relu(x @ m.a) @ m.b, a=torch.randn(256, 1024),
                    b=torch.randn(1024, 256))
    return export(tmp, module, (torch.randn(64, 256),), "mlp")


def test_planning_and_the_estimate_use_the_parameter(tmp_path):
    """A decode step's matmul (M 1, N one stick): its K is split 8 ways by default; a core
    that alone moves bytes 360x slower makes work division split K 16 ways; the report says
    what was used, and `run --report` (from the manifest) prices the directory the same way."""
    pt2 = export(tmp_path, Lambda(lambda m, x: x @ m.w, w=torch.randn(4096, 64)),
                 (torch.randn(1, 4096),), "decode")
    plain = compile_pt2(pt2, tmp_path / "plain")
    slow = compile_pt2(pt2, tmp_path / "slow", sets=["cost.core_bytes_per_s=1e8"])
    report, base = load_json(slow / "report.json"), load_json(plain / "report.json")
    assert report["cost"]["params"]["core_bytes_per_s"] == 1e8
    assert base["cost"]["params"]["core_bytes_per_s"] == DEFAULT_PARAMS.core_bytes_per_s
    assert load_json(slow / "manifest.json")["cost_params"] == {"core_bytes_per_s": 1e8}
    assert "cost_params" not in load_json(plain / "manifest.json")
    splits = {d: [(r["op"], r["split"]) for r in load_json(d / "report.json")[
        "work_division"]["ops"]] for d in (plain, slow)}
    assert splits == {plain: [("matmul", "[c1:2, r0:8]")], slow: [("matmul", "[c1:2, r0:16]")]}
    rows = {d: {r["op"]: r["time_us"] for r in load_json(d / "report.json")[
        "work_division"]["ops"]} for d in (plain, slow)}
    assert all(rows[slow][op] > rows[plain][op] for op in rows[slow] if op in rows[plain])
    again = cost_for_directory(slow)
    assert again["totals"]["time_us"] == report["cost"]["totals"]["time_us"]
    assert again["params"]["core_bytes_per_s"] == 1e8


def test_trials_plan_with_the_configured_pipeline(mlp, tmp_path, monkeypatch):
    """`--tiling auto` prices its candidates with work_division's configured cores and the
    cost model's parameters (the trials used the defaults before)."""
    seen = []
    real = trials.divide_work

    def recording(sub, options, memo, params):
        seen.append((options.cores, params.core_bytes_per_s))
        return real(sub, options, memo, params)
    monkeypatch.setattr(trials, "divide_work", recording)
    compile_pt2(mlp, tmp_path / "auto", tiling="auto",
                sets=["work_division.cores=8", "cost.core_bytes_per_s=1e10"])
    assert seen and set(seen) == {(8, 1e10)}


def test_the_cli_refuses_a_bad_cost_parameter_before_any_work(mlp, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-m", "spyrec", "compile", str(mlp), "-o",
                           str(tmp_path / "out"), "--set", "cost.hbm_bytes_per_s=0"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr.strip() == ("spyrec: --set 'cost.hbm_bytes_per_s=0': "
                                   "cost.hbm_bytes_per_s must be above 0, got 0")
