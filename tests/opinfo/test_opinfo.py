"""A fixed slice of the OpInfo sweep (`make opinfo` runs all of it): one sample of every op,
alternating between sample 0 in fp32 and sample 1 in fp16 along the op list, so both dtypes
are covered and the slice stays under a minute.

Each case must pass (compile + simulate == eager) or be refused with exit 3 and a reason;
a crash or a wrong answer fails. Ops spyrec lowers must pass: only `MAY_REFUSE` may be refused.
"""

from __future__ import annotations

import pytest

from tests.opinfo.samples import OPS, op_id, run_sample, samples

# Not lowered on this branch (another branch adds most of them), or refused by design.
MAY_REFUSE = {
    "div.trunc_rounding", "div.floor_rounding", "nn.functional.hardtanh", "pow",
    "clamp", "clamp_min", "clamp_max", "addmm", "addmv", "max.reduction_with_dim", "min.reduction_with_dim",
    "index_select", "__getitem__", "alias_copy", "expand_copy", "permute_copy", "t_copy",
    "transpose_copy", "unsqueeze_copy", "squeeze_copy", "view_copy", "narrow_copy",
    "split_with_sizes_copy", "unbind_copy",
    # by design: scatter's reduce="multiply"/"amax"/... variants (aten.scatter.reduce) and
    # index_put with a boolean mask (a data-dependent shape) are refused with exit 3
    "scatter", "index_put",
    # by design: repeat_interleave with a runtime repeats tensor (a data-dependent shape)
    "repeat_interleave",
}

CASES = [(op_id(*o), *(("float32", 0), ("float16", 1))[k % 2]) for k, o in enumerate(OPS)]


@pytest.mark.parametrize("op,dtype,index", CASES, ids=[f"{o}-{d}-{i}" for o, d, i in CASES])
def test_opinfo_sample(op, dtype, index):
    count = len(samples(op, dtype))
    if count == 0:
        pytest.skip(f"{op} has no sample in {dtype}")
    verdict = run_sample(op, dtype, min(index, count - 1))
    if verdict.outcome == "unexportable":
        pytest.skip(f"torch.export cannot export this sample: {verdict.detail}")
    if verdict.outcome == "refused":
        assert op in MAY_REFUSE, f"{op} is lowered but the sample was refused: {verdict.detail}"
        return
    assert verdict.outcome == "passed", verdict.detail
