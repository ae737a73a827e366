"""The extension-function binder's CPU half: the module that exposes a function, roles, dtypes,
shortlists, the ways to call it, the harness it renders, and the probe's search run on a stand-in.

Test data: tests/data/harvest/extension/fused_rms_norm.cu, our own pybind11 extension."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from sftbuild.harvest.cuda_extract import exposed_by, extract_kernels
from sftbuild.bind.binders import extension as ext
from sftbuild.bind.binders.extension import ExtensionFunction
from sftbuild.record import Record

RMS_FILE = Path(__file__).resolve().parents[1] / "data" / "harvest" / "extension" / "fused_rms_norm.cu"
RMS = r"""#include <torch/extension.h>
__global__ void rms_kernel(float* out, const float* input, const float* weight, float eps, int rows, int cols) {
  int r = blockIdx.x; if (r < rows) out[r * cols] = input[r * cols] * weight[0] * eps;
}
void rms_norm_out(torch::Tensor& result,  // [rows, cols]
                  const torch::Tensor& input, const at::Tensor& weight, double epsilon = 1e-6, bool fast = false) {
  rms_kernel<<<input.size(0), 1>>>(result.data_ptr<float>(), input.data_ptr<float>(), weight.data_ptr<float>(),
                                   (float)epsilon, input.size(0), input.size(1));
}
"""


def record_of(src: bytes, path: str) -> Record:
    k = extract_kernels(src)[0][0]
    entry = {"kernels": [k.name], "params": k.params, "launch_sites": k.launch_sites, "includes": k.includes,
             "include_sets": ["torch", "python"], "template": k.template, "launcher": k.launcher}
    return Record(language="cuda", code=k.code, source="t", entry=entry, provenance={"path": path})


@pytest.fixture(scope="module")
def rms() -> Record:
    return record_of(RMS_FILE.read_bytes(), "fused_rms_norm.cu")


def test_harvest_keeps_the_function_and_the_module_that_exposes_it(rms):
    fn = rms.entry["launcher"]
    assert fn["name"] == "fused_rms_norm" and "PYBIND11_MODULE" not in rms.code + fn["code"]
    assert fn["exposed"] == {"kind": "PYBIND11_MODULE", "module": "TORCH_EXTENSION_NAME", "name": "rms_norm"}
    lib = ('TORCH_LIBRARY(my_ops, m) { m.def("gelu(Tensor x) -> Tensor"); }\n'
           'TORCH_LIBRARY_IMPL(my_ops, CUDA, m) { m.impl("gelu", TORCH_FN(fused_gelu)); }')
    assert exposed_by(lib, "fused_gelu") == {"kind": "TORCH_LIBRARY_IMPL", "module": "my_ops", "name": "gelu",
                                             "schema": "gelu(Tensor x) -> Tensor"}
    assert exposed_by(lib, "other") is None


def test_roles_returned_tensors_and_written_arguments():
    rec = record_of(RMS.encode(), "rms.cu")
    fn = rec.entry["launcher"]
    assert ext.returns(fn) == ("void", 0)
    assert [(r["name"], r["role"]) for r in ext.roles(fn, rec)] == [
        ("result", "out"), ("input", "in"), ("weight", "in"), ("epsilon", "float"), ("fast", "flag")]
    assert ext.declaration(fn) == ("void rms_norm_out(torch::Tensor& result, const torch::Tensor& input, "
                                   "const at::Tensor& weight, double epsilon, bool fast);")
    assert ext.dtypes_of(rec.code + fn["code"]) == ["float32"]
    assert ext.dispatch(rec.code + fn["code"]) == "float only: no AT_DISPATCH"
    # a project's own dispatch macro, defined out of sight: every float dtype is tried
    assert ext.dtypes_of("MY_DISPATCH_FLOATING_TYPES(x.scalar_type(), ...)") == ["float32", "float16", "bfloat16"]
    opt = {"name": "f", "params": ["torch::Tensor x", "const c10::optional<at::Tensor>& bias"],
           "code": "torch::Tensor f("}
    found = ext.roles(opt)
    assert [r["role"] for r in found] == ["in", "absent", "out"]
    assert list(ext.arguments(found, [{"name": "x", "shape": [4]}], 1, {})) == [["t:1", "none:", "t:0"]]
    assert ext.call_args(opt, ["t:1", "none:", "t:0"])[1] == ["sftbuild_arg0", "{}"]
    bad = {"name": "f", "params": ["torch::Tensor x", "std::vector<int64_t> dims"], "code": "torch::Tensor f("}
    assert "no role: std::vector<int64_t> dims" in ext.unprobeable(bad)


@pytest.mark.parametrize("body,work", [
    ("return at::gelu(x);", "at::gelu"), ("auto y = x.sum(); return y;", ".sum"),
    ("auto y = torch::empty_like(x); k<<<1, 1>>>(y.data_ptr<float>()); return y * 2;", "tensor arithmetic (y *)"),
    ("auto y = at::empty({x.numel() * 2}, x.options()); k<<<1, 1>>>(y.data_ptr<float>()); return y;", None)])
def test_a_function_computing_with_torch_beside_its_kernel_is_not_probed(body, work):
    fn = {"name": "f", "params": ["torch::Tensor x"], "code": "torch::Tensor f(torch::Tensor x) {" + body + "}"}
    assert ext.torch_work(fn) == work
    assert (ext.unprobeable(fn) or "").endswith("beside its kernel: not probed") == bool(work)


def test_plan_shortlists_by_name_and_flow_and_dtypes_by_dispatch(rms):
    task = ExtensionFunction().plan(rms)
    assert task.shortlist[0] == "rms_norm" and task.dtypes == ["float32", "float16", "bfloat16"]
    assert task.dispatch == "AT_DISPATCH_FLOATING_TYPES_AND2" and task.exposed["name"] == "rms_norm"
    assert task.declaration == "torch::Tensor fused_rms_norm(torch::Tensor input, torch::Tensor weight, double eps);"
    assert [(r["name"], r["role"]) for r in task.roles] == [
        ("input", "in"), ("weight", "in"), ("eps", "float"), ("return:0", "out")]


def test_calls_put_tensors_by_name_scalars_from_params_and_render_the_harness(rms):
    from sftbuild.ops import get
    from sftbuild.trial import harness as H

    rec = record_of(RMS.encode(), "rms.cu")
    found = ext.roles(rec.entry["launcher"], rec)
    calls = list(ext.arguments(found, [{"name": "x", "shape": [4, 8]}, {"name": "w", "shape": [8]}], 1,
                               dict(get("rms_norm").params)))
    assert calls[:2] == [["t:0", "t:1", "t:2", "float:1e-05", "flag:0"], ["t:0", "t:1", "t:2", "float:1e-05", "flag:1"]]
    assert list(ext.arguments(found, [{"name": "x", "shape": [4]}], 1, {})) == []  # one input: no fit
    import dataclasses

    bound = dataclasses.replace(rms, binding={"op": "rms_norm", "harness": "extension_function",
                                              "harness_args": {"args": ["t:1", "t:2", "float:1e-05", "t:0"]}})
    src = H.render(bound, {}, ["float32", "float16"])
    assert "at::Tensor sftbuild_arg1 = sftbuild_t(2);" in src
    assert "auto sftbuild_ret = ::fused_rms_norm(sftbuild_arg0, sftbuild_arg1, (double)1e-05);" in src
    assert "sftbuild_t(0).copy_(sftbuild_ret.reshape(sftbuild_t(0).sizes()));" in src
    assert "launch<c10::Half>" in src
    out = dataclasses.replace(rec, binding={"op": "rms_norm", "harness": "extension_function",
                                            "harness_args": {"args": calls[0]}})
    assert "  ::rms_norm_out(sftbuild_arg0, sftbuild_arg1, sftbuild_arg2, (double)1e-05, false);" in \
        H.render(out, {}, ["float32"])


def test_the_probe_binds_a_matching_function_and_names_why_a_broken_one_is_not(rms):
    from sftbuild.bind.extension_probe import run_probe

    def norm(x, w, eps, weighted=True):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * (w if weighted else 1)

    task = dataclasses.replace(ExtensionFunction().plan(rms), shortlist=["rms_norm_offset", "rms_norm"], dtypes=["float32"])
    good = run_probe(norm, task, time.monotonic(), time.monotonic() + 60, "cpu")
    assert good["binding"]["op"] == "rms_norm", good
    assert good["binding"]["harness_args"] == {"args": ["t:1", "t:2", "float:1e-05", "t:0"]}
    ev = good["evidence"]
    assert len(ev["shapes"]) >= 3 and ev["candidates_rejected"][0]["op"] == "rms_norm_offset"
    assert ev["dispatch"] == "AT_DISPATCH_FLOATING_TYPES_AND2"
    broken = run_probe(lambda x, w, eps: norm(x, w, eps, weighted=False), task, time.monotonic(),
                       time.monotonic() + 60, "cpu")
    assert "no shortlisted op matched the extension function's outputs (2 tried" in broken["unbound"]
    assert "worst error" in broken["evidence"]["candidates_rejected"][1]["why"]


def test_validate_compiles_the_record_on_the_lean_torch_header_first_and_as_it_is_where_that_fails(
        rms, monkeypatch, tmp_path):
    import dataclasses

    from sftbuild.config import Config
    from sftbuild.validate import pipeline

    bound = dataclasses.replace(rms, binding={"op": "rms_norm", "harness": "extension_function", "dtypes": ["float32"],
                                              "harness_args": {"args": ["t:1", "t:2", "float:1e-05", "t:0"]}})
    task = pipeline.compile_task(bound, Config().validate, "", str(tmp_path))
    assert '#include "torch_lean.cuh"' in task.lean["code"] and "torch_lean.cuh" in task.lean["headers"]
    assert "#include <torch/extension.h>" in task.code
    tried = []
    monkeypatch.setattr(pipeline, "_compile_cuda", lambda t: tried.append(t.code) or {"ok": len(tried) == 2})
    assert pipeline.compile_cuda(task) == {"ok": True}
    assert tried == [task.lean["code"], task.code]


ELSEWHERE = RMS_FILE.parents[1] / "extension_elsewhere"  # our own: kernels in a .cu, the function in binding.cpp


def test_an_extension_function_of_another_file_calling_the_records_launcher_is_its_entry_point(make_ctx):
    from sftbuild.harvest import stage as harvest

    ctx = make_ctx()
    harvest.run(ctx, [str(ELSEWHERE)])
    rec = next(r for r in ctx.store.records() if r.entry["kernels"] == ["rms_norm_kernel"])
    assert rec.entry["launcher"]["name"] == "launch_rms_norm"  # the raw launcher stays, for host_launcher
    fn = rec.entry["extensions"][0]
    assert fn["name"] == "rms_norm_fwd" and fn["path"] == "binding.cpp" and fn["qualified"] == "ops::rms_norm_fwd"
    assert fn["exposed"]["name"] == "rms_norm_fp32" and "binding.cpp" not in rec.entry["headers"]
    # the header of host code the function never calls is left out of its build
    assert '#include "unused_blas.h"' not in fn["includes"] and '#include "norm.h"' in fn["includes"]
    task = ExtensionFunction().plan(rec)
    assert task.function == "sftbuild_rms_norm_fwd" and task.dtypes == ["float32", "float16"]
    assert task.declaration == "torch::Tensor sftbuild_rms_norm_fwd(torch::Tensor& input, torch::Tensor& weight, " \
                                  "double eps);"
    # the template is called at the dtype of its first tensor, by its qualified name, after the launcher's code
    assert "case at::kHalf: return ::ops::rms_norm_fwd<__half>(input, weight, eps);" in task.source
    assert task.source.index("void launch_rms_norm") < task.source.index("torch::Tensor rms_norm_fwd")
    assert [r["role"] for r in task.roles] == ["in", "in", "float", "out"] and task.shortlist[0] == "rms_norm"


def test_a_returned_vector_of_tensors_counts_what_its_return_lists():
    code = ("std::vector<at::Tensor> norm_and_residual(at::Tensor& x, at::Tensor& r) {\n"
            "  auto out = at::empty_like(x); auto res = at::empty_like(r);\n  k<<<1, 1>>>(out.data_ptr<float>());\n"
            "  return {out, res};\n}")
    fn = {"name": "norm_and_residual", "params": ["at::Tensor& x", "at::Tensor& r"], "code": code}
    assert ext.returns(fn) == ("std::vector<at::Tensor>", 2)
    assert ext.call_args(fn, ["t:2", "t:3", "t:0", "t:1"])[2] == [("sftbuild_ret[0]", "sftbuild_t(0)"),
                                                                  ("sftbuild_ret[1]", "sftbuild_t(1)")]
