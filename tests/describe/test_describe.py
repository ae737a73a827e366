"""Describe: features from the parse tree, seeded bilingual instructions, the fidelity check, bindings."""

import dataclasses

import pytest

from sftbuild import plugins
from sftbuild.describe import features as F
from sftbuild.describe.describers import DESCRIBERS, Describer
from sftbuild.describe import stage as S
from sftbuild.describe import text as T
from sftbuild.bind import binders
from sftbuild.plugins import PluginError
from sftbuild.record import Record

CONF = {"seed": 0, "languages": ["en", "zh"], "levels": ["brief", "detailed"], "arch": "sm_90", "smem_budget": 232448}
PLAIN = """
// a comment that mentions __shared__ and atomicAdd must not count
__global__ void scale_kernel(float* y, const float* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = 2.f * x[i];
}
"""
FANCY = """
__global__ void __launch_bounds__(256) sum_kernel(float* y, const float* x, int rows, int cols) {
  __shared__ float buf[32];
  float v = x[threadIdx.x];
  v += __shfl_down_sync(0xffffffff, v, 16);
  float4 q = reinterpret_cast<const float4*>(x)[0];
  if (threadIdx.x == 0) atomicAdd(y, v + q.x);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(0), "l"(x));
}
"""


def _rec(code, name, params):
    return Record(language="cuda", code=code, source="test", entry={"kernels": [name], "params": params})


def test_detectors_read_the_tree_not_comments():
    f = F.extract(_rec(PLAIN, "scale_kernel", ["float* y", "const float* x", "int n"]))
    assert f["techniques"] == ["grid_stride_loop"] and f["dtypes"] == ["float32"]
    g = F.extract(_rec(FANCY, "sum_kernel", ["float* y", "const float* x", "int rows", "int cols"]))
    assert {"shared_memory", "warp_shuffle", "vectorized_access", "atomics", "launch_bounds",
            "async_copy"} <= set(g["techniques"])
    assert g["block_size"] == 256 and g["reduction"] == "warp_shuffle"


def test_a_template_is_said_to_be_over_what_its_parameters_are():
    """llm.c's `template<int BlockSize> __global__ void ...` is a template over a block size, not over
    its element type, as the instructions had said of every template."""
    cases = {"template <typename T>\n__global__ void k(T* y, const T* x, int n) { y[0] = x[0]; }": "type",
             "template<int BlockSize>\n__global__ void k(float* y, const float* x, int n) { y[0] = x[0]; }": "value",
             "template <class T, int N> __global__ __launch_bounds__(256) void k(T* y, const T* x, int n) {}": "both"}
    for code, over in cases.items():
        rec = Record(language="cuda", code=code, source="test",
                     entry={"kernels": ["k"], "params": ["float* y", "const float* x", "int n"], "template": True})
        assert F.extract(rec)["templated"] == over, code
    assert F.extract(_rec(PLAIN, "scale_kernel", ["float* y", "const float* x", "int n"]))["templated"] is None


def test_triton_features():
    code = ("import triton\nimport triton.language as tl\n"
            "@triton.autotune(configs=[triton.Config({'BLOCK': 128}), triton.Config({'BLOCK': 256})], key=['n'])\n"
            "@triton.jit\ndef k(x, y, n, BLOCK: tl.constexpr):\n"
            "    o = tl.arange(0, BLOCK)\n    v = tl.load(x + o, mask=o < n)\n    tl.store(y, tl.sum(tl.dot(v, v)))\n")
    f = F.extract(Record(language="triton", code=code, source="t", entry={"kernels": ["k"]}))
    assert {"tensor_cores", "autotune", "masked_access"} <= set(f["techniques"])
    assert f["autotune_configs"] == 2 and f["block_sizes"] == [128, 256] and f["reduction"] == "tl_reduce"


def test_instructions_are_seeded_bilingual_and_faithful():
    rec = _rec(FANCY, "sum_kernel", ["float* y", "const float* x", "int rows", "int cols"])
    rec = dataclasses.replace(rec, binding=binders.infer(rec))
    assert rec.binding.op == "row_sum"
    status, reason, payload = S.describe(rec, CONF)
    assert status == "ok", payload.get("problems")
    instr = payload["instructions"]
    assert set(instr) == {"en:brief", "en:detailed", "zh:brief", "zh:detailed"}
    assert S.describe(rec, CONF)[2]["instructions"] == instr  # same record, same text
    assert "shared memory" in instr["en:brief"] and "共享内存" in instr["zh:brief"]
    assert "sm_90" in instr["en:detailed"] and "sm_90" in instr["zh:detailed"]
    assert "256 threads per block" in instr["en:detailed"] and "256个线程" in instr["zh:detailed"]
    assert T.claims(instr["en:detailed"]) == T.claims(instr["zh:detailed"])
    phrasings = {S.describe(rec, {**CONF, "seed": s})[2]["instructions"]["en:brief"].split(":")[0]
                 for s in range(40)}
    assert len(phrasings) >= 5


def test_every_family_has_five_phrasings():
    facts = {"lang_name": "CUDA", "noun": {"en": "kernel", "zh": "Kernel"}, "semantics": {"en": "s", "zh": "s"},
             "inputs": ["`x`"], "outputs": ["`y`"], "dtypes": ["float32"], "techniques": [], "reduction": None,
             "accumulate": False, "templated": False, "block_size": None, "arch": "sm_90", "smem_budget": 1,
             "signature": "k(x, y)"}
    for fam, noun in T.NOUNS.items():
        for lang in ("en", "zh"):
            for level in T.LEVELS:
                texts = {T.render({**facts, "noun": {"en": noun[0], "zh": noun[1]}, "variant": v}, lang, level)
                         for v in range(6)}
                assert len(texts) >= 5, (fam, lang, level)


def test_fidelity_catches_a_planted_claim():
    feats = F.extract(_rec(PLAIN, "scale_kernel", ["float* y", "const float* x", "int n"]))
    honest = {"en:brief": "Write a CUDA kernel that doubles x using a grid-stride loop.",
              "zh:brief": "实现一个CUDA Kernel将x翻倍，要求使用grid-stride循环。"}
    assert T.check(honest, feats) == []
    planted = {**honest, "en:brief": honest["en:brief"] + " It uses shared memory."}
    problems = T.check(planted, feats)
    assert any("shared_memory" in p for p in problems)
    twins = {**honest, "zh:brief": honest["zh:brief"] + "使用原子操作。"}
    assert T.check(twins, {**feats, "techniques": feats["techniques"] + ["atomics"]})  # languages disagree


def test_a_planted_claim_drops_the_record(monkeypatch):
    rec = _rec(PLAIN, "scale_kernel", ["float* y", "const float* x", "int n"])
    real = T.render
    monkeypatch.setattr(T, "render", lambda facts, lang, level: real(facts, lang, level)
                        + (" Uses shared memory." if lang == "en" else ""))
    status, reason, payload = S.describe(rec, CONF)
    assert (status, reason) == ("dropped", "description_mismatch") and payload["problems"]


TECHNIQUES = {"shared_memory", "warp_shuffle", "vectorized_access", "tensor_cores", "atomics", "grid_stride_loop",
              "launch_bounds", "cooperative_groups", "async_copy", "cub_primitives", "autotune", "masked_access"}


def test_describers_are_listed_and_read_their_own_phrases_back():
    listed = {name: summary for kind, name, summary in plugins.describe("describer")}
    assert set(listed) >= TECHNIQUES and all(listed.values())
    for d in DESCRIBERS:
        for lang in ("en", "zh"):
            # each phrase is claimed as its own technique and as no other
            assert T.claims(f"Use {d.phrase[lang]}.")["techniques"] == [d.name], (d.name, lang)


def test_describers_can_be_turned_off():
    rec = _rec(FANCY, "sum_kernel", ["float* y", "const float* x", "int rows", "int cols"])
    chosen = DESCRIBERS.configured({"shared_memory": False, "atomics": False})
    techs = F.extract(rec, chosen)["techniques"]
    assert "shared_memory" not in techs and "atomics" not in techs and "warp_shuffle" in techs
    status, _, payload = S.describe(rec, CONF, chosen)
    assert status == "ok" and "shared memory" not in payload["instructions"]["en:brief"]
    with pytest.raises(PluginError, match=r"describe\.describers\.tiling"):
        DESCRIBERS.configured({"tiling": {}}, "describe.describers")


LDG = "__global__ void copy_kernel(float* y, const float* x, int n) { y[threadIdx.x] = __ldg(x + threadIdx.x); }\n"


def test_a_new_technique_is_one_class(monkeypatch):
    class ReadOnlyCache(Describer):
        """Loads through the read-only data cache: `__ldg`."""
        name = "read_only_cache"
        phrase = {"en": "read-only cache loads", "zh": "只读缓存加载"}
        claim = r"read-only cache|只读缓存"

        def cuda(self, s):
            return s.has("__ldg")

    monkeypatch.setitem(DESCRIBERS._members, ReadOnlyCache.name, ReadOnlyCache)
    rec = _rec(LDG, "copy_kernel", ["float* y", "const float* x", "int n"])
    assert F.extract(rec)["techniques"] == ["read_only_cache"]
    status, _, payload = S.describe(rec, CONF)
    assert status == "ok", payload.get("problems")
    assert "read-only cache loads" in payload["instructions"]["en:brief"]
    assert "只读缓存加载" in payload["instructions"]["zh:brief"]
    planted = {"en:brief": "Use read-only cache loads.", "zh:brief": "使用只读缓存加载。"}
    assert T.check(planted, F.extract(_rec(PLAIN, "scale_kernel", ["float* y", "const float* x", "int n"])))


@pytest.fixture(scope="module")
def aten(aten_workspace):
    from sftbuild.store import Store

    return list(Store(aten_workspace).records())


def test_aten_binding_ratio(aten):
    total = len(aten)
    assert total >= 30
    bound = [r for r in aten if r.binding or binders.infer(r)]
    unbound = sorted({r.name for r in aten if not (r.binding or binders.infer(r))})
    ratio = len(bound) / total
    print(f"\nATen kernels bound: {len(bound)}/{total} = {ratio:.0%}")
    print("unbound:", unbound)
    assert ratio >= 0.8, unbound  # BINDINGS.md says why the rest have no harness


def test_aten_descriptions_are_unique_and_faithful(aten):
    seen = {}
    for rec in aten:
        rec = dataclasses.replace(rec, binding=rec.binding or binders.infer(rec))
        status, reason, payload = S.describe(rec, CONF)
        assert status == "ok", (rec.name, payload.get("problems"))
        for key, text in payload["instructions"].items():
            assert seen.setdefault(text, rec.id) == rec.id, (key, text[:120])


def test_a_probed_binding_is_described_by_the_op_and_entry_the_probe_confirmed():
    from sftbuild import ops
    from sftbuild.harvest.triton_extract import extract_kernels

    code = ("import torch\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"
            "def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
            "    o = tl.arange(0, BLOCK)\n    m = o < n\n"
            "    tl.store(y_ptr + o, -tl.load(x_ptr + o, mask=m), mask=m)\n\n\n"
            "def gelu_helper(x):\n    return x\n\n\n"
            "def flip_sign(A):\n    out = torch.empty_like(A)\n"
            "    _gelu_kernel[(1,)](A, out, A.numel(), BLOCK=1024)\n    return out\n")
    k = extract_kernels(code)[0][0]
    rec = Record(language="triton", code=k.code, source="t",
                 entry={"kernels": [k.name], "entry_points": k.entry_points, "wrapper": "gelu_helper"})
    rec = dataclasses.replace(rec, binding={"kind": "op", "op": "neg", "how": "probed", "dtypes": ["float32", "float16"],
                                         "call": {"entry": "flip_sign", "kind": "function", "args": [["input", 0]],
                                                  "outputs": [{"from": "return", "index": None}]}})
    status, _, payload = S.describe(rec, CONF)
    assert status == "ok", payload.get("problems")
    text = " ".join(payload["instructions"].values())
    assert ops.get("neg").semantics["en"] in text
    assert ops.get("gelu").semantics["en"] not in text
    assert "`flip_sign(A)`" in text and "gelu_helper" not in text


def test_a_cpu_reference_task_names_what_is_compared_and_every_kernel_it_launches():
    code = ("__global__ void mean_kernel(float* mean, const float* inp, int N, int C) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) mean[i] = inp[i * C]; }\n"
            "__global__ void rstd_kernel(float* rstd, const float* inp, int N, int C) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) rstd[i] = inp[i * C]; }\n"
            "void norm2(float* mean, float* rstd, const float* inp, int N, int C) {\n"
            "  mean_kernel<<<N, 1>>>(mean, inp, N, C); rstd_kernel<<<N, 1>>>(rstd, inp, N, C); }\n")
    rec = Record(language="cuda", code=code, source="t", entry={"kernels": ["mean_kernel", "rstd_kernel"]})
    ref = {"cpu": "norm_cpu", "launcher": "norm2", "cpu_code": "void norm_cpu(float* mean, float* rstd) {}",
           "call_args": ["mean", "rstd", "inp", "N", "C"], "compare": [0, 1], "cpu_params": ["mean", "rstd"]}
    rec = dataclasses.replace(rec, binding={"kind": "program", "program": "norm.cu:norm_cpu", "how": "file_reference",
                                            "harness": "file_reference", "harness_args": {"ref": ref}})
    status, _, payload = S.describe(rec, CONF)
    assert status == "ok", payload.get("problems")
    for key, text in payload["instructions"].items():
        if key.endswith("brief") or key.endswith("detailed"):
            assert "`rstd_kernel`" in text, key  # the launcher's other kernel is part of the task
            assert "`mean`" in text and "`rstd`" in text, key  # the arrays compared
    # main() passes its own variables; the task names the CPU function's parameters, which it shows
    ref.update(call_args=["out", "probs", "targets"], compare=[0], cpu="crossentropy_cpu",
               cpu_code="void crossentropy_cpu(float* losses, const float* probs, const int* targets) {}",
               cpu_params=[{"name": "losses"}, {"name": "probs"}, {"name": "targets"}])
    status, _, payload = S.describe(rec, CONF)
    assert status == "ok", payload.get("problems")
    text = payload["instructions"]["en:brief"]
    assert "every element of `losses` must match" in text and "`out`" not in text


def test_a_probed_entrys_output_contract_is_stated_in_its_task():
    from sftbuild.describe.stage import _with_contract

    said = _with_contract(["`loss: [] float32`", "`q: [B, H, S, D]`", "`k`"],
                          [{"dtype": "input"}, {"order": [0, 2, 1, 3]}, None])
    assert said[0] == "`loss: [] float32` (returned in the inputs' dtype)"
    assert "dimension order (0, 2, 1, 3)" in said[1] and said[2] == "`k`"
    assert _with_contract(["`y`"], None) == ["`y`"]
    zh = _with_contract(["`loss`", "`q`"], [{"dtype": "input"}, {"order": [0, 2, 1, 3]}], "zh")
    assert zh[0] == "`loss`（返回时dtype与输入相同）" and "(0, 2, 1, 3)" in zh[1] and "returned" not in zh[1]
