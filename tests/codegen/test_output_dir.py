"""The output directory: complete, deterministic, atomic, and self-consistent."""

import filecmp

import pytest
import torch

from spyrec.errors import ConfigError
from tests.programs import compile_pt2, export, load_json


class GatherAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 100)

    def forward(self, x, idx):
        return torch.softmax(self.emb(idx) + x, dim=-1)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prog")
    return export(tmp, GatherAdd(), (torch.randn(6, 100), torch.tensor([3, 0, 49, 7, 7, 1])))


def test_every_file_is_written(program, tmp_path):
    out = compile_pt2(program, tmp_path / "out")
    names = {p.name for p in out.iterdir()}
    assert {"manifest.json", "opspecs.json", "bundle.mlir", "constants.npz", "program.pt2",
            "report.json", "report.txt", "sdsc_0.json"} <= names
    manifest = load_json(out / "manifest.json")
    n_ops = len(manifest["kernels"][0]["ops"])
    assert {f"sdsc_{i}.json" for i in range(n_ops)} <= names
    bundle = (out / "bundle.mlir").read_text()
    assert [f'"sdsc_{i}.json"' in bundle for i in range(n_ops)] == [True] * n_ops


def test_same_input_gives_byte_identical_files(program, tmp_path):
    a = compile_pt2(program, tmp_path / "a")
    b = compile_pt2(program, tmp_path / "b")
    names = sorted(p.name for p in a.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    volatile = {"report.json", "report.txt"}  # wall times
    assert set(mismatch) <= volatile and not errors


def test_failed_compile_keeps_the_previous_output(program, tmp_path):
    out = compile_pt2(program, tmp_path / "out")
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(ConfigError):
        compile_pt2(program, out, sets=["work_division.cores=many"])
    assert (out / "manifest.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_manifest_signature_and_addresses(program, tmp_path):
    m = load_json(compile_pt2(program, tmp_path / "out") / "manifest.json")
    assert m["inputs"] == ["x", "idx"] and len(m["outputs"]) == 1
    roles = {t["name"]: t["role"] for t in m["tensors"]}
    assert roles["x"] == "input" and roles["p_emb_weight"] == "constant"
    spans = sorted((t["hbm_address"], t["hbm_address"] + t["device_bytes"]) for t in m["tensors"])
    assert all(a % 128 == 0 for a, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    idx = next(t for t in m["tensors"] if t["name"] == "idx")
    assert (idx["host_dtype"], idx["device_dtype"], idx["device_size"]) == ("int64", "int32",
                                                                            [1, 32])


def test_gather_lists_the_index_tensor_first(program, tmp_path):
    out = compile_pt2(program, tmp_path / "out")
    sdsc = load_json(out / "sdsc_0.json")["0_identity"]
    dsc = sdsc["dscs_"][0]["identity"]
    nodes, labeled = dsc["scheduleTree_"], dsc["labeledDs_"]
    assert [n["indirectAllocType_"] for n in nodes] == ["index_tensor", "value_tensor",
                                                       "no_indirection"]
    assert nodes[0]["relatedIndirectAccessAlloc_"] == "allocate-Tensor1_hbm"
    assert (labeled[0]["dsType_"], labeled[0]["dataFormat_"]) == ("KERNEL_IDX", "SENUINT32")
    assert dsc["computeOp_"][0]["indirectAccessIndexLabeledDs"] == ["Tensor0-idx0"]
    assert dsc["computeOp_"][0]["inputLabeledDs"] == ["Tensor1-idx1"]
    (gathered,) = nodes[1]["indirectDim_"].values()
    assert gathered["size"] == 50     # the table's rows: the extent SuperDSC itself lacks
    gather = load_json(out / "opspecs.json")["kernels"][0]["specs"][0]
    assert gather["op"] == "identity"
    index, table, result = gather["args"]
    assert (index["name"], index["is_input"], index["device_coordinates"]) == \
        ("idx", True, ["0", "c0"])
    assert table["device_coordinates"] == ["floor(c1/32)", "IndirectAccess('idx')", "Mod(c1, 32)"]
    assert result["is_input"] is False and result["arg_index"] == 2


def test_per_core_split_covers_the_iteration_space(program, tmp_path):
    out = compile_pt2(program, tmp_path / "out", sets=["work_division.cores=3"])
    spec = load_json(out / "opspecs.json")["kernels"][0]["specs"][1]
    cores = spec["cores"]
    assert len(cores) == 3
    assert [c["ranges"]["c0"] for c in cores] == [[0, 2], [2, 4], [4, 6]]
    first_input = [c["arg_start_bytes"][0] for c in cores]
    x_row_bytes = 32 * 4  # one fp32 stick row of the [4, 6, 32] device layout
    assert first_input[1] - first_input[0] == 2 * x_row_bytes


def test_dump_after_prints_the_ir(program, tmp_path, capsys):
    compile_pt2(program, tmp_path / "out", dump_after="stick_layout")
    err = capsys.readouterr().err
    assert "// ----- IR after stick_layout -----" in err and "device [4, 6, 32]" in err
    with pytest.raises(ConfigError, match="choose one of: all, lower, stick_layout"):
        compile_pt2(program, tmp_path / "out2", dump_after="nope")
