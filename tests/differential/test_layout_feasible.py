"""The stick-layout search never reports an infeasible program for ops spyrec supports: a copy
of the accessed view (an identity op, the compact of A-layout §7) can always feed an operand,
even from a stick-sparse tensor (a `[N, 1]` intermediate, a reduction along the stick).
Random small shapes, dims of 1 included; each program must compile and equal eager."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare
from tests.programs import Lambda

SIZES = st.sampled_from([1, 2, 3, 5, 33, 64, 70])

# Each reads an intermediate across its stick in some way the default layouts do not serve.
PROGRAMS = {
    "mm_of_transposed_intermediate": lambda m, a, b: torch.mm((a * 2).t(), b),
    "rowsum_meets_stick": lambda m, a, b: a.sum(1) + b.t(),   # A-layout §6 I
    "keepdim_sum_transposed": lambda m, a, b: (a.sum(1, keepdim=True) + 1).t() @ b,
    "matmul_of_reductions": lambda m, a, b: a.amax(0, keepdim=True).t() @ b.mean(0,
                                                                                 keepdim=True),
    "sparse_into_softmax": lambda m, a, b: torch.softmax(a.sum(1, keepdim=True).t(), dim=1),
}


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(PROGRAMS)), m=SIZES, k=SIZES, n=SIZES,
       dtype=st.sampled_from([torch.float32, torch.float16]))
def test_no_supported_program_is_infeasible(tmp_path_factory, name, m, k, n, dtype):
    g = torch.Generator().manual_seed(m * 10000 + k * 100 + n)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(m, n, generator=g).to(dtype)
    run_and_compare(tmp_path_factory.mktemp(name), Lambda(PROGRAMS[name]), (a, b))


def test_transpose_of_2015x1_intermediate_feeds_mm(tmp_path):
    """The case from issue 14: `[2015, 1]` is stick-sparse by default (A-layout §3.2)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2015, 1, generator=g), torch.randn(2015, 7, generator=g)
    run_and_compare(tmp_path, Lambda(PROGRAMS["mm_of_transposed_intermediate"]), (a, b))
