"""Instructions state the task: op records name the op, shapes, dtypes and layouts; pair and Inductor
records quote their reference program; outputs are the pointers the code writes; unbound kernels
claim no computation."""
from __future__ import annotations

from sftbuild.describe import stage as S
from sftbuild.describe import text as T
from sftbuild.describe.writes import roles
from sftbuild.record import Record
from tests.output import fixture

CONF = {"seed": 0, "languages": ["en", "zh"], "levels": ["brief", "detailed"], "arch": "sm_90", "smem_budget": 232448}


def _describe(rec):
    status, reason, payload = S.describe(rec, CONF)
    assert status == "ok", payload.get("problems")
    return payload["instructions"]


def test_written_pointers_are_outputs_and_non_const_inputs_are_not():
    code = """__global__ void k(float* a, float* b, float* c, float* d, const float* e, int n) {
      float4* q = reinterpret_cast<float4*>(c);   // a store through a derived pointer
      float v = a[threadIdx.x] + b[0];            // a and b are non-const but only read
      q[0] = make_float4(v, e[0], 0.f, 0.f);
      atomicAdd(&d[3], v);
    }"""
    params = ["float* a", "float* b", "float* c", "float* d", "const float* e", "int n"]
    assert roles("cuda", code, "k", params) == (["a", "b", "e", "n"], ["c", "d"])
    deref = "__global__ void k(float* inp, float* out, int n) { *(out + threadIdx.x) = inp[threadIdx.x]; }"
    assert roles("cuda", deref, "k", ["float* inp", "float* out", "int n"]) == (["inp", "n"], ["out"])
    triton = """
@triton.jit
def k(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    out = y_ptr + offs
    tl.store(out, tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n)
"""
    assert roles("triton", triton, "k", ["x_ptr", "y_ptr", "n", "stride", "BLOCK"])[1] == ["y_ptr"]
    helper = """
@triton.jit
def _tile(src, dst, off):
    tl.store(dst + off, tl.load(src + off))

@triton.jit
def k(x_ptr, out_ptr, n):
    _tile(x_ptr, out_ptr + 1, tl.arange(0, 16))
"""
    assert roles("triton", helper, "k", ["x_ptr", "out_ptr", "n"]) == (["x_ptr", "n"], ["out_ptr"])
    st_vec = "__global__ void k(float* out, const float* in, int n) { st_vec(out + (8*threadIdx.x) * n, v); }"
    assert roles("cuda", st_vec, "k", ["float* out", "const float* in", "int n"])[1] == ["out"]


def test_an_op_record_names_the_op_its_shapes_dtypes_and_layouts():
    rec = fixture.records()["cuda"][0]
    instr = _describe(rec)
    en = instr["en:detailed"]
    assert "op `relu`" in en and "ReLU" in en and "(1,)" in en and "(1048576,)" in en
    assert "dtype: float32." in en and "Layouts: contiguous." in en
    assert "reads `x`, `n` and writes `y`" in en  # the const pointer x is no output
    assert "算子`relu`" in instr["zh:detailed"] and "写入`y`" in instr["zh:detailed"]
    triton = _describe(fixture.records()["triton"][0])["en:brief"]
    assert "writes `out_ptr`" in triton and "`add(a, b)`" in triton and "Layouts: contiguous, sliced." in triton


def test_generic_launch_bindings_map_parameters_onto_the_op():
    code = "__global__ void sm(float* out, const float* inp, int N, int C) { out[blockIdx.x * C] = inp[0]; }"
    rec = Record(language="cuda", code=code, source="t", entry={"kernels": ["sm"], "params": [
        "float* out", "const float* inp", "int N", "int C"]}, binding={
        "kind": "op", "op": "softmax", "dtypes": ["float32"], "harness": "generic_launch",
        "harness_args": {"args": ["ptr:0", "ptr:1", "int:0", "int:1"], "grid": "rows"}})
    en = _describe(rec)["en:brief"]
    assert "`out` is `y`, `inp` is `x`, `N` is `rows`, `C` is `cols`" in en


def test_pair_and_inductor_records_quote_their_program():
    recs = fixture.records()
    kb = recs["kernelbench"][0]
    for key, text in _describe(kb).items():
        assert kb.binding.reference.strip() in text and "`ModelNew`" in text and "Triton" in text, key
    ind = recs["inductor"][0]
    instr = _describe(ind)
    assert ind.binding.reference.strip() in instr["en:brief"]
    assert "triton_poi_fused_mul_relu_1(in_ptr0, out_ptr0, xnumel, XBLOCK)" in instr["en:brief"]
    assert "torch.compile" in instr["en:brief"] and "writes `out_ptr0`" in instr["en:brief"]
    assert "dynamic shapes" in instr["en:detailed"]


def test_a_quoted_program_is_not_a_claim_about_the_kernel():
    text = "Write ModelNew.\n\n```python\n# uses shared memory and atomicAdd, float16\nclass Model: pass\n```"
    assert T.claims(text)["techniques"] == []


def test_an_unbound_kernel_claims_no_computation():
    code = "__global__ void mystery(const float* a, float* b, int n) { b[threadIdx.x] = a[threadIdx.x]; }"
    rec = Record(language="cuda", code=code, source="t",
                 entry={"kernels": ["mystery"], "params": ["const float* a", "float* b", "int n"]})
    instr = _describe(rec)
    assert "not stated" in instr["en:brief"] and "writes `b`" in instr["en:brief"]
    assert "computes" not in instr["en:brief"] and "inferred" not in instr["en:detailed"]
    assert "没有绑定参考计算" in instr["zh:brief"]


def test_reading_writes_stays_fast_on_hostile_code():
    import time

    chain = "\n".join(f"    v{i} = v{i + 1} + v{i + 1}" for i in range(2000))
    cases = [("cuda", "k(" * 100000), ("cuda", "__global__ void k(float* a){" + "a[" * 100000 + "}"),
             ("cuda", "__global__ void k(float* a){" + "f(a, " * 50000 + "}"),
             ("triton", "@triton.jit\ndef k(a, n):\n    v2000 = a\n" + chain + "\n    tl.store(v0, 1)\n")]
    for language, code in cases:
        start = time.monotonic()
        roles(language, code, "k", ["float* a"] if language == "cuda" else ["a", "n"])
        assert time.monotonic() - start < 5, (language, code[:40])
    assert roles("triton", cases[-1][1], "k", ["a", "n"])[1] == ["a"]  # a chain 2000 long is followed
