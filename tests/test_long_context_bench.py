"""bench/long_context.py keeps working: its table built at 256 tokens (a GQA causal prefill and
a paged decode step), with the compulsory bytes it must count, and a process past its time
limit reported as a cause, not a crash."""

import re
import sys

from bench import long_context, scale

STICK = 128          # bytes: a device tensor's smallest allocation


def test_the_table_counts_the_programs_bytes_and_judges_the_targets(capsys):
    rows = long_context.main(["--sizes", "256", "--kinds", "gqa,paged", "--paged-sizes", "256",
                              "--pages", "64", "--timeout", "300"])
    by_name = {r["program"]: r for r in rows}
    assert list(by_name) == ["prefill_gqa_256", "paged64_256"]
    prefill, paged = by_name["prefill_gqa_256"], by_name["paged64_256"]
    # q and the output [1, 32, 256, 128], k and v [1, 8, 256, 128], fp16; not the causal-mask
    # table the lowering adds as a constant
    assert prefill["compulsory"] == 2 * (32 + 8) * 256 * 128 * 2
    # q and the output [1, 32, 1, 128]; of each [8, 8, 64, 128] pool the 4 pages the block
    # table selects; the block table (4 int64) in one stick
    assert paged["compulsory"] == 2 * 32 * 128 * 2 + 2 * 4 * 8 * 64 * 128 * 2 + STICK
    for row in rows:
        assert row["ops"] > 0 and row["est_us"] > row["roof_us"] * 0.99
        assert row["traffic_ratio"] == row["hbm_bytes"] / row["compulsory"]
        assert row["status"] == "met" or row["status"].startswith("not met: ")
        assert re.fullmatch(r"materialized|(flash \d+x\d+ ?)+", row["attention"])
    assert prefill["target"] == "est<=1.3x causal"      # issue 58: the causal bound, no traffic limit
    assert paged["target"] == "traffic<=1.2x comp"
    # (256 + 1) / 512 of the flops: a compute-bound bound would be lower, this one is memory's
    assert prefill["causal_us"] <= prefill["roof_us"]
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["program", "ops", "compile_s"]
    assert table[2].startswith("prefill_gqa_256") and table[3].startswith("paged64_256")


def test_a_process_past_its_time_limit_is_a_cause():
    try:
        scale.measured([sys.executable, "-c", "import time; time.sleep(30)"], "sleep", 1.0,
                       timeout_s=0.2)
    except scale.ProcessFailed as failed:
        assert failed.cause == "timeout 0.2 s" and failed.returncode is None
    else:
        raise AssertionError("measured returned for a process past its time limit")


def test_a_failed_compile_is_a_row_with_the_errors_line():
    row = long_context.empty_row(long_context.Program("prefill", 32768, 32), "compile: timeout 60 s")
    assert row["program"] == "prefill_32k" and row["status"] == "compile: timeout 60 s"
    assert row["target"] == "est<=1.3x causal, compile<=5s"
    assert "prefill_32k" in long_context.table([row])


def test_the_bounds_count_every_score_or_the_causal_ones():
    prefill = long_context.Program("prefill", 4096, 8)
    # 2 matmuls x 2 flops x 32 heads x 128 x 4096^2 scores, or 4096 * 4097 / 2 of them
    assert prefill.attention_flops() == 274_877_906_944
    assert prefill.attention_flops(causal=True) == 137_472_507_904
    decode = long_context.Program("decode", 8192, 8)
    assert decode.attention_flops() == decode.attention_flops(causal=True) == 4 * 32 * 128 * 8192
