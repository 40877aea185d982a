"""One HBM byte count in the compiler (`plan/hbm_bytes.py`): the split estimate's bytes per
core are core 0's share of the same count `--tiling auto`, attention tiling and LX
placement's mismatch rows sum over every core, gathers included."""

import torch

from spyrec.device import STICK_BYTES
from spyrec.ir.lx import core_slices
from spyrec.plan.core_splits import divide_work
from spyrec.plan.hbm_bytes import access_bytes, access_sticks, core0_slice, hbm_bytes, op_bytes
from spyrec.plan.split_estimate import split_estimate
from tests.plan.test_plan_value import _before_work_division
from tests.programs import Lambda


def _planned(tmp_path, name, module=None, inputs=None):
    graph, options = _before_work_division(tmp_path, name, module, inputs)
    divide_work(graph, options)
    return graph


def test_every_core_moves_core_0s_count_gathers_included(tmp_path):
    table = torch.randn(1000, 64)
    module = Lambda(lambda m, idx, x: m.table[idx] * x, table=table)
    inputs = (torch.tensor([[3, 999, 0, 5] * 16] * 2), torch.randn(2, 64, 64))
    graph = _planned(tmp_path, "gather", module, inputs)
    gathers = 0
    for op in graph.ops:
        cores = len(core_slices(op))
        for _, access in op.accesses():
            sticks = access_sticks(graph, op, access, core0_slice(op, op.core_splits))
            assert access_bytes(graph, op, access) == cores * sticks * STICK_BYTES, op.name
        if op.index_inputs:
            gathers += 1
            # the table's rows the slice gathers (one stick each), not the whole table
            table_access = op.inputs[0]
            assert access_bytes(graph, op, table_access) < \
                cores * graph.buffers[table_access.buffer].layout.device_bytes
    assert gathers == 1


def test_the_totals_are_every_core_times_the_estimates_bytes_per_core(tmp_path):
    graph = _planned(tmp_path, "mlp_fp32")
    per_core, cores = [], []
    for op in graph.ops:       # no producers: every access in HBM, as after placing nothing
        cost = split_estimate(graph, op, op.core_splits)
        per_core.append(cost.hbm_bytes_per_core)
        cores.append(len(core_slices(op)))
        assert op_bytes(graph, op) >= cost.hbm_bytes_per_core * cores[-1], op.name
    assert per_core == [22528, 8256, 8192, 22528, 4128] and cores == [32] * 5
    # the weights every core reads whole cost a broadcast cohort's share in both counts
    assert hbm_bytes(graph) == sum(b * k for b, k in zip(per_core, cores)) == 2_100_224
    assert [op_bytes(graph, op) for op in graph.ops] == [
        2_752_512, 270_336, 262_144, 3_211_264, 135_168]
