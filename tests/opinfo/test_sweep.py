"""`make opinfo`'s driver: the summary line and the refusal table (one tiny sweep)."""

import re

from tests.opinfo.sweep import main, refusal_cause


def test_sweep_prints_the_summary_and_groups_refusals(capsys):
    assert main(["--ops", "abs", "addmv", "--max-samples", "1", "--refused"]) == 0
    out = capsys.readouterr().out
    summary = re.search(r"^opinfo: (\d+) passed, (\d+) failed, (\d+) refused, (\d+) "
                        r"unexportable", out, re.M)
    assert summary, out
    passed, failed, refused, _ = map(int, summary.groups())
    assert failed == 0 and passed + refused == 4   # 1 sample x 2 ops x 2 dtypes
    if refused:  # addmv, until its lowering lands
        assert re.search(r"^addmv +2  aten\.addmv\.default", out, re.M), out


def test_refusal_cause_drops_the_temporary_directory():
    detail = ("/tmp/spyrec-opinfo-ab12/model.pt2: dynamic shapes are not supported yet "
              "(range constraint u0)")
    assert refusal_cause(detail) == "model.pt2: dynamic shapes are not supported yet " \
        "(range constraint u0)"
    assert refusal_cause("the program uses operations spyrec does not support:\n"
                         "  aten.addmv.default (node addmv, x.py:1 in f)\nRewrite") == \
        "aten.addmv.default (node addmv, x.py:1 in f)"
