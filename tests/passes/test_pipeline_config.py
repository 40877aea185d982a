"""Pipeline YAML and --set: validation with the valid names in every message."""

import pytest

from spyrec.errors import ConfigError
from spyrec.passes.pipeline import build_pipeline, describe, read_pipeline_file


def test_default_pipeline_reads():
    entries, where = read_pipeline_file(None)
    names = [p.name for p in build_pipeline(entries, where=where)]
    assert names == ["gather_coordinates", "split_outputs", "dequant_matmul", "stick_layout",
                     "matmul_padding", "flash_attention", "symbolic_lengths",
                     "coarse_tiling", "split_padding", "work_division", "superdsc_legalize",
                     "stage_inputs", "length_shares",
                     "scratchpad_planning", "fusion", "memory_planning"]


def test_set_overrides_one_option():
    entries, _ = read_pipeline_file(None)
    pipeline = build_pipeline(entries, ["work_division.cores=8"])
    assert describe(pipeline)[9] == {"pass": "work_division",
                                     "options": {"cores": 8, "strategy": "cost", "lx_intermediates": True,
                                                 "chain_moves": True, "k_split": True,
                                                 "replicas": True, "overlap_moves": False,
                                                 "spread_within": 0.02}}


def test_unknown_pass_lists_valid_names():
    with pytest.raises(ConfigError, match=r"unknown pass 'stick_layuot' \(did you mean "
                                          r"'stick_layout'\?\); valid passes: coarse_tiling, dequant_matmul, flash_attention, fusion, gather_coordinates, "):
        build_pipeline([{"pass": "stick_layuot"}])


def test_unknown_option_lists_options():
    with pytest.raises(ConfigError, match="work_division has no option 'core'.*options: cores"):
        build_pipeline([{"pass": "work_division", "core": 4}])


def test_wrong_type():
    with pytest.raises(ConfigError, match="work_division.cores must be int, got 'many'"):
        build_pipeline([{"pass": "work_division"}], ["work_division.cores=many"])


def test_set_needs_pass_option_value():
    with pytest.raises(ConfigError, match="expected PASS.OPTION=VALUE"):
        build_pipeline([{"pass": "work_division"}], ["cores=4"])
    with pytest.raises(ConfigError, match="pass 'tiling' is not in the pipeline"):
        build_pipeline([{"pass": "work_division"}], ["tiling.x=4"])


def test_bad_yaml_file(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("pass: stick_layout\n")
    with pytest.raises(ConfigError, match="a pipeline is a YAML list"):
        read_pipeline_file(f)


def _names(*names):
    return [{"pass": n} for n in names]


def test_order_names_the_pass_that_must_come_first():
    with pytest.raises(ConfigError, match="pass memory_planning \\(entry 1\\) needs a device "
                                          "layout for every buffer; put stick_layout before it"):
        build_pipeline(_names("memory_planning", "stick_layout"))


def test_a_pass_that_adds_buffers_after_addressing_is_refused():
    with pytest.raises(ConfigError, match="matmul_padding runs after memory_planning and adds "
                                          "ops and buffers without them; end the pipeline with "
                                          "memory_planning"):
        build_pipeline(_names("stick_layout", "memory_planning", "matmul_padding"))


def test_the_default_order_holds():
    entries, where = read_pipeline_file(None)
    build_pipeline(entries, where=where)   # check_order passes


def test_empty_pipeline_file(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="the pipeline is empty"):
        read_pipeline_file(f)


def test_set_value_is_safe_yaml_only():
    with pytest.raises(ConfigError, match="not valid YAML .*could not determine a constructor"):
        build_pipeline(_names("stick_layout", "memory_planning"),
                       ["stick_layout.optimizer=!!python/object/apply:os.system ['true']"])
    with pytest.raises(ConfigError, match="--set 'stick_layout.beam_width=0': "
                                          "stick_layout.beam_width must be at least 1"):
        build_pipeline(_names("stick_layout", "memory_planning"), ["stick_layout.beam_width=0"])


def test_option_ranges_are_checked_when_the_pipeline_is_built():
    with pytest.raises(ConfigError, match="--set 'work_division.cores=64': work_division.cores "
                                          "must be between 1 and 32, got 64"):
        build_pipeline(_names("stick_layout", "work_division", "memory_planning"),
                       ["work_division.cores=64"])


@pytest.mark.parametrize("sets, message", [
    (["stage_inputs.max_fraction=-1"],
     r"stage_inputs.max_fraction must be between 0 and 1 \(a share of the LX budget\), got -1"),
    (["stage_inputs.budget_bytes=999999999"],
     r"stage_inputs.budget_bytes must be between 0 and 1625344 \(the LX bytes per core the "
     r"compiler may use\), got 999999999"),
])
def test_stage_inputs_options_out_of_range(sets, message):
    with pytest.raises(ConfigError, match=message):
        build_pipeline([{"pass": "stage_inputs"}], sets)


@pytest.mark.parametrize(("old", "new"), [
    ("coarse_tiling.attention=never", "flash_attention.mode"),
    ("coarse_tiling.key_tile=64", "flash_attention.key_tile"),
    ("coarse_tiling.symbolic=tiled", "symbolic_lengths.mode"),
])
def test_an_option_that_moved_to_its_own_pass_names_the_new_place(old, new):
    """Issue 58 split coarse_tiling: a `--set` (or pipeline file) in the old form is told the
    new name, not "no such option"."""
    entries, _ = read_pipeline_file(None)
    with pytest.raises(ConfigError, match=rf"--set '{old}': {old.split('=')[0]} is now "
                                          rf"{new} \(the pass of its own since issue 58\)"):
        build_pipeline(entries, [old])


def test_a_tiling_file_with_attention_entries_needs_the_flash_pass(tmp_path):
    from spyrec.compile_plan import _with_tiling

    path = tmp_path / "t.yaml"
    path.write_text("attention:\n  - {query_tile: 64, key_tile: 64}\n")
    entries, _ = read_pipeline_file(None)
    pipeline = build_pipeline([e for e in entries if e["pass"] != "flash_attention"])
    with pytest.raises(ConfigError, match=r"no flash_attention pass for its attention entries"):
        _with_tiling(pipeline, path)
    configured = _with_tiling(build_pipeline(entries), path)
    assert [p.config for p in configured if p.name in ("flash_attention", "coarse_tiling")] \
        == [str(path)] * 2
