"""The output directory: complete, deterministic, atomic, and self-consistent."""

import filecmp
import zlib

import numpy as np
import pytest
import torch

from spyrec.build_record import STAMP_BYTES
from spyrec.errors import ConfigError
from spyrec.layout import DeviceLayout
from spyrec.sim.specs import TensorSpec
from spyrec.sim.transfer import element_offsets
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
    assert {"manifest.json", "opspecs.json", "bundle.mlir", "report.json", "report.txt",
            "sdsc_0.json"} <= names
    assert "program.pt2" not in names and "constants.npz" not in names  # weights stored once
    assert "program.pt2" in {p.name for p in compile_pt2(program, tmp_path / "sc",
                                                         self_contained=True).iterdir()}
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
    spans = sorted((t["hbm_address"], t["hbm_address"] + t["device_bytes"]) for t in m["tensors"]
                   if t.get("lx_address") is None)
    assert all(a % 128 == 0 for a, _ in spans)
    # only intermediates share bytes (at different times: memory_planning reuse)
    fixed = sorted((t["hbm_address"], t["hbm_address"] + t["device_bytes"]) for t in m["tensors"]
                   if t["role"] != "intermediate")
    assert all(end <= nxt for (_, end), (nxt, _) in zip(fixed, fixed[1:]))
    assert all(end <= spans[0][0] or start >= max(e for _, e in fixed)
               for start, end in spans if (start, end) not in fixed)
    idx = next(t for t in m["tensors"] if t["name"] == "idx")
    assert (idx["host_dtype"], idx["device_dtype"], idx["device_size"]) == ("int64", "int32",
                                                                            [1, 32])


def test_gather_lists_the_index_tensor_first(program, tmp_path):
    """The index is checked (op 0, `wrapindex`), then read first by the op it gathers for: the
    add the gather is fused into, or (fuse=false) the gather itself."""
    out = compile_pt2(program, tmp_path / "out")
    specs = load_json(out / "opspecs.json")["kernels"][0]["specs"]
    check = specs[0]
    assert check["op"] == "wrapindex" and check["op_info"]["constants"]["size"] == 50
    fused = specs[1]
    assert fused["op"] == "add"
    index, table, x, result = fused["args"]
    assert (index["name"], index["is_input"], index["device_coordinates"]) == \
        ("idx__check50", True, ["0", "c0"])
    assert table["device_coordinates"] == ["floor(c1/32)", "IndirectAccess('idx__check50')",
                                           "Mod(c1, 32)"]
    assert x["name"] == "x" and result["is_input"] is False and result["arg_index"] == 3
    # the wrapindex op is SuperDSC: numbers in constantInfo_, the rest in attributes_
    (wrap,) = load_json(out / "sdsc_0.json")["0_wrapindex"]["dscs_"][0].values()
    assert {c["name_"] for c in wrap["constantInfo_"].values()} == {"size", "low"}
    assert wrap["computeOp_"][0]["attributes_"]["index_tensor"] == "idx"
    # the fused add reads the table through the checked index (SuperDSC indirect fields)
    (dsc,) = load_json(out / "sdsc_1.json")["1_add"]["dscs_"][0].values()
    nodes, labeled = dsc["scheduleTree_"], dsc["labeledDs_"]
    assert [n["indirectAllocType_"] for n in nodes] == ["index_tensor", "value_tensor",
                                                       "no_indirection", "no_indirection"]
    assert nodes[0]["relatedIndirectAccessAlloc_"] == "allocate-Tensor1_hbm"
    assert (labeled[0]["dsType_"], labeled[0]["dataFormat_"]) == ("KERNEL_IDX", "SENUINT32")
    assert dsc["computeOp_"][0]["indirectAccessIndexLabeledDs"] == ["Tensor0-idx0"]
    assert dsc["computeOp_"][0]["inputLabeledDs"] == ["Tensor1-idx1", "Tensor2-idx2"]
    (gathered,) = nodes[1]["indirectDim_"].values()
    assert gathered["size"] == 50     # the table's rows: the extent SuperDSC itself lacks
    unfused = compile_pt2(program, tmp_path / "unfused", sets=["gather_coordinates.fuse=false"])
    gather = load_json(unfused / "opspecs.json")["kernels"][0]["specs"][1]
    assert gather["op"] == "identity" and gather["args"][0]["name"] == "idx__check50"
    (dsc,) = load_json(unfused / "sdsc_1.json")["1_identity"]["dscs_"][0].values()
    assert [n["indirectAllocType_"] for n in dsc["scheduleTree_"]] == [
        "index_tensor", "value_tensor", "no_indirection"]
    report = load_json(unfused / "report.json")
    assert report["gather_coordinates"]["unfused"] == 1


def test_per_core_split_covers_the_iteration_space(program, tmp_path):
    out = compile_pt2(program, tmp_path / "out", sets=["work_division.cores=3",
                                                       "work_division.strategy=greedy"])
    # the sub of the softmax (the fused gather-add reads the index with c0 as its stick var,
    # 6 < 32 elements: one core, as every core starts at a stick boundary)
    spec = load_json(out / "opspecs.json")["kernels"][0]["specs"][3]
    assert spec["op"] == "sub"
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
    with pytest.raises(ConfigError, match="choose one of: all, lower, gather_coordinates, "
                                            "split_outputs, dequant_matmul, stick_layout"):
        compile_pt2(program, tmp_path / "out2", dump_after="nope")


def test_weights_bin_holds_each_constant_once_aligned_and_memory_mappable(tmp_path):
    """weights.bin: each constant's host form (bf16 as its bits) at a 64-byte multiple, as the
    manifest's `weights` section says; the manifest records the source's absolute path."""
    import numpy as np

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.randn(3, 70), requires_grad=False)
            self.b = torch.nn.Parameter(torch.randn(70, 5).bfloat16(), requires_grad=False)

        def forward(self, x):
            return (x @ self.a).bfloat16() @ self.b

    module = Two()
    pt2 = export(tmp_path, module, (torch.randn(2, 3),), "two")
    out = compile_pt2(pt2, tmp_path / "out")
    manifest = load_json(out / "manifest.json")
    assert manifest["format"] == "spyrec-manifest/4"
    assert manifest["source"]["path"] == str(pt2.resolve()) and manifest["source"]["copy"] is None
    weights = manifest["weights"]
    assert weights["file"] == "weights.bin" and weights["alignment"] == 4096
    # the tensors, then the build stamp (spyrec/build_record.py): one line naming the build
    assert (out / "weights.bin").stat().st_size == weights["bytes"] + STAMP_BYTES
    blob = np.memmap(out / "weights.bin", dtype=np.uint8, mode="r")
    assert bytes(blob[weights["bytes"]:]) == \
        f"spyrec-build {manifest['build']['id']}\n".encode()
    tensors = {t["name"]: t for t in manifest["tensors"]}
    # the device stores bf16 as fp16: b's values, rounded once
    expected = {"a": module.a.numpy(), "b": module.b.float().half().numpy()}
    assert len(weights["tensors"]) == 2
    for entry in weights["tensors"]:
        t = tensors[entry["name"]]
        assert entry["offset"] % 4096 == 0 and entry["bytes"] == t["device_bytes"]
        data = blob[entry["offset"]:entry["offset"] + entry["bytes"]]
        assert entry["crc32"] == f"{zlib.crc32(data):08x}"
        assert (entry["device_dtype"], entry["device_size"]) == (t["device_dtype"],
                                                                 t["device_size"])
        value = expected[t["source"]]
        layout = DeviceLayout(tuple(t["device_size"]), tuple(t["stride_map"]), t["device_dtype"])
        spec = TensorSpec(t["name"], "constant", tuple(t["host_shape"]), t["host_dtype"], layout,
                          0, t["device_bytes"], None)
        device = blob[entry["offset"]:entry["offset"] + entry["bytes"]].view(value.dtype)
        offsets = element_offsets(spec)      # the layout's definition, element by element
        assert np.array_equal(device[offsets], value)
        padding = np.ones(len(device), dtype=bool)
        padding[offsets.ravel()] = False
        assert padding.any() and np.isnan(device[padding]).all()
