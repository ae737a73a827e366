"""Static checks, the compile gate and ptxas parsing on the red-team cases (CPU, real nvcc)."""
import pytest

from tests.redteam.cases import MATMUL_KERNEL, RELU_KERNEL, ROWSUM_KERNEL, cases
from sftbuild.trial import compile as C
from sftbuild.plugins import PluginError
from sftbuild.trial import extension, inline_sources
from sftbuild.validate import static

STATIC = [c for c in cases() if c.static]
RUNTIME = [c for c in cases() if not c.static]


@pytest.mark.parametrize("case", STATIC, ids=lambda c: c.name)
def test_static_catches(case):
    found = static.scan(case.record["code"], case.record["language"])
    assert found and found[0].reason in case.expect, found


@pytest.mark.parametrize("case", RUNTIME, ids=lambda c: c.name)
def test_static_passes_what_only_running_can_judge(case):
    assert static.scan(case.record["code"], case.record["language"]) == []


def test_static_budget_is_configurable():
    code = "__global__ void k(float* x) { __shared__ float b[1024]; x[0] = b[0]; }"
    assert static.scan(code, "cuda", {"shared_memory_budget": 1024})[0].reason == "bad_launch"
    assert static.scan(code, "cuda") == []


def test_static_checks_are_plugins_one_file_each():
    """Each module of the folder holds one registered check; they run in their declared order."""
    import pkgutil

    modules = {m.name for m in pkgutil.iter_modules(static.__path__) if not m.name.startswith("_")}
    assert {c.__module__.rsplit(".", 1)[1] for c in static.STATIC_CHECKS} == modules
    builtin = ["host_calls", "torch_in_host", "launch_shape", "shared_budget", "python_forbidden",
               "torch_does_the_work", "disguise", "python_effects", "torch_override", "precision_flags", "triton_launch"]
    assert [n for n in (c.name for c in static.STATIC_CHECKS.configured({})) if n in builtin] == builtin


def test_overriding_torchs_own_operators_is_a_cheat_but_an_own_namespace_is_not():
    cpp = "TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl(\"softmax\", &mine); }"
    assert static.scan(cpp, "cuda")[0].check == "torch_override"
    assert static.scan("TORCH_LIBRARY(mylib, m) { m.def(\"f(Tensor x) -> Tensor\"); }", "cuda") == []
    py = "import torch\nimport torch.library as L\n_lib = L.Library('aten', 'IMPL')\n"
    found = static.scan(py, "triton")
    assert (found[0].check, found[0].reason) == ("torch_override", "cheat")
    assert "torch.library.Library('aten')" in found[0].detail
    assert static.scan("import torch\n_lib = torch.library.Library('mylib', 'DEF')\n", "triton") == []


def test_config_turns_a_static_check_off():
    code = "torch::Tensor f(torch::Tensor a, torch::Tensor b){ return at::matmul(a, b); }"
    assert static.scan(code, "cuda")[0].check == "torch_in_host"
    assert static.scan(code, "cuda", checks={"torch_in_host": False}) == []
    with pytest.raises(PluginError, match="validate.static_checks.nope"):
        static.scan(code, "cuda", checks={"nope": False})


def test_a_registered_check_joins_the_scan(monkeypatch):
    monkeypatch.setattr(static.STATIC_CHECKS, "_members", dict(static.STATIC_CHECKS._members))

    @static.STATIC_CHECKS.register
    class NoPrintf(static.StaticCheck):
        """printf in device code."""
        name = "no_printf"
        languages = ("cuda",)

        def check(self, src):
            if "printf(" in src.cuda:
                yield self.found("bad_launch", "printf in device code")

    found = static.scan('__global__ void k(float* x) { printf("%f", x[0]); }', "cuda")
    assert [(f.reason, f.check) for f in found] == [("bad_launch", "no_printf")]
    assert static.scan('// printf(\n__global__ void k(float* x) { x[0] = 1.f; }', "cuda") == []


def test_allocations_in_host_code_are_not_cheats():
    code = "torch::Tensor f(torch::Tensor x){ auto y = torch::empty_like(x); at::zeros({3}, x.options()); return y;}"
    assert static.scan(code, "cuda") == []


def test_inline_sources_read_without_running():
    case = next(c for c in cases() if c.name == "twin_relu_cuda")
    found = inline_sources.extract(case.record["code"])
    assert found["name"] == "rt_relu" and "relu_kernel" in found["cuda_sources"] and found["functions"] == ["run"]
    assert extension.kernel_names(case.record["code"]) == ["relu_kernel"]


@pytest.mark.nvcc
def test_compile_gate_and_ptxas(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    src = {"relu": RELU_KERNEL, "rowsum": ROWSUM_KERNEL, "matmul": MATMUL_KERNEL,
           "broken": RELU_KERNEL.replace("fmaxf", "x[").replace("0.f;", "0.f")}
    tasks = [{"code": "#include <cuda_runtime.h>\n" + s, "harness": None, "include_sets": [], "arch": "sm_90",
              "timeout": 30, "nvcc": "", "cache_dir": str(tmp_path)} for s in src.values()]
    with ThreadPoolExecutor(4) as pool:
        res = dict(zip(src, pool.map(C.compile_task, tasks)))
    assert res["relu"]["ok"] and res["rowsum"]["ok"] and res["matmul"]["ok"]
    assert res["broken"]["ok"] is False and res["broken"]["reason"] == "compile_error"
    assert res["matmul"]["resources"]["smem"] == 2 * 16 * 16 * 4
    assert res["rowsum"]["resources"]["registers"] > 0
    assert set(res["matmul"]["resources"]["kernels"]) == {"_Z13matmul_kernelPKfS0_Pfiii"}
    again = C.compile_task(tasks[0])
    assert again["cached"] and again["ok"]


def test_parse_ptxas_spills_and_stack():
    log = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'
ptxas info    : Function properties for _Z1kPf
    64 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]"""
    r = C.parse_ptxas(log)
    assert (r["registers"], r["smem"], r["stack"], r["spill_stores"], r["spill_loads"]) == (40, 2048, 64, 16, 8)


def test_triton_aot_compiles_and_rejects(tmp_path):
    twin = next(c for c in cases() if c.name == "twin_relu_triton").record["code"]
    broken = next(c for c in cases() if c.name == "triton_compile_error").record["code"]
    ok = C.triton_gate({"code": twin, "cache_dir": str(tmp_path), "arch": "sm_90"})
    assert ok["ok"] and ok["aot"] == {"relu_kernel": "ok"}
    bad = C.triton_gate({"code": broken, "cache_dir": str(tmp_path), "arch": "sm_90"})
    assert bad["ok"] is False and bad["reason"] == "compile_error"


FLAG_GEMS_SHAPED = """import triton
import triton.language as tl
try:
    _finitef = tl.extra.cuda.libdevice.finitef
except AttributeError:
    _finitef = None


@triton.jit
def sum_kernel(inp, out, M, BLOCK_SIZE: tl.constexpr):
    if tl.constexpr(inp.dtype.element_ty == tl.float16):
        cdtype: tl.constexpr = tl.float32
    else:
        cdtype: tl.constexpr = inp.dtype.element_ty
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(inp + offs, mask=offs < M, other=0).to(cdtype)
    tl.atomic_add(out, tl.sum(x))


@triton.jit
def logit_kernel(x_ptr, y_ptr, n, OUT_DTYPE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.5).to(tl.float32)
    tl.store(y_ptr + offs, tl.log(x / (1.0 - x)).to(OUT_DTYPE), mask=offs < n)


@triton.jit
def isfinite_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(y_ptr + offs, _finitef(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def logit(x, y, out_dtype):
    logit_kernel[(1,)](x, y, x.numel(), OUT_DTYPE=out_dtype, BLOCK_SIZE=1024)
"""


def test_the_gate_reads_pointers_and_dtypes_from_their_use_and_blames_no_guess_of_its_own(tmp_path):
    """Three FlagGems kernels the gate had dropped as compile_error though they compile under the JIT:
    `inp.dtype.element_ty` (a pointer the gate took for an int), `y.to(OUT_DTYPE)` (a dtype it gave 128)
    and a helper the module binds inside a top-level `try`. A misspelt `tl.` function is still an error."""
    res = C.triton_gate({"code": FLAG_GEMS_SHAPED, "cache_dir": str(tmp_path), "arch": "sm_90"})
    assert res["ok"], res.get("log")
    assert res["aot"]["sum_kernel"] == "ok" and res["aot"]["logit_kernel"] == "ok", res["aot"]
    assert res["aot"]["isfinite_kernel"].startswith("skipped"), res["aot"]
    misspelt = FLAG_GEMS_SHAPED.replace("tl.log(x /", "tl.logg(x /")
    bad = C.triton_gate({"code": misspelt, "cache_dir": str(tmp_path), "arch": "sm_90"})
    assert bad["ok"] is False and bad["reason"] == "compile_error", bad


def test_the_gate_unrolls_a_static_range_a_handful_of_times_not_128(tmp_path, monkeypatch):
    # the launch passes HC=x.shape[1] (a few heads): the gate cannot read it, and 128 unrolled copies
    # of a tile loop took minutes to compile, dropping an honest kernel as compile_timeout
    code = ("import triton\nimport triton.language as tl\n\n@triton.jit\n"
            "def k(x_ptr, y_ptr, HC: tl.constexpr, BLOCK: tl.constexpr):\n"
            "    o = tl.arange(0, BLOCK)\n"
            "    for s in tl.static_range(0, HC):\n"
            "        tl.store(y_ptr + s * BLOCK + o, tl.load(x_ptr + s * BLOCK + o))\n\n"
            "def run(x, y):\n    k[(1,)](x, y, HC=x.shape[0], BLOCK=64)\n")
    import triton.compiler

    seen = {}

    orig = triton.compiler.ASTSource

    def spy(fn, signature, constexprs):
        seen.update({fn.arg_names[k[0]]: v for k, v in constexprs.items()})
        return orig(fn=fn, signature=signature, constexprs=constexprs)

    monkeypatch.setattr(triton.compiler, "ASTSource", spy)
    res = C.triton_gate({"code": code, "cache_dir": str(tmp_path), "arch": "sm_90"})
    assert res["ok"] and res["aot"] == {"k": "ok"}
    assert seen == {"HC": C.UNROLLED_DEFAULT, "BLOCK": 64}


def test_the_gate_reads_launch_values_from_the_wrappers_defaults():
    import ast

    code = ("def run(x, block_n=32, *, warps=4):\n    k[(1,)](x, BLOCK_N=block_n, W=warps, HC=x.shape[1])\n"
            "def other(x):\n    k[(1,)](x, BLOCK_N=block_n, FLAG=True)\n"
            "k0[(1,)](X=1024)\n")
    assert C.launch_values(ast.parse(code)) == {"X": 1024, "BLOCK_N": 32, "W": 4}


def test_a_gate_result_is_kept_by_content_and_a_timeout_is_not(tmp_path):
    runs = []

    def gate(task):  # stands in for the sandboxed gate: a timeout comes back without `keep`
        runs.append(task.code)
        return {"ok": "hang" not in task.code, "reason": None, "seconds": 1.0, "cached": False,
                **({} if "hang" in task.code else {"keep": True})}

    task = {"code": "@triton.jit\ndef k(x):\n    pass\n", "cache_dir": str(tmp_path), "arch": "sm_90"}
    first, again = C.cached_gate(task, gate), C.cached_gate(task, gate)
    assert (first["cached"], again["cached"], again["ok"], again["seconds"], len(runs)) == (False, True, True, 1.0, 1)
    assert "keep" not in first and "keep" not in again
    assert C.cached_gate({**task, "arch": "sm_80"}, gate)["cached"] is False  # another target, another key
    hang = {**task, "code": task["code"].replace("pass", "hang = 1")}  # other code (a comment alone is the same module)
    assert [C.cached_gate(hang, gate)["cached"] for _ in range(2)] == [False, False]
    assert len(runs) == 4


def test_the_gate_process_starts_only_for_top_level_jit_kernels(monkeypatch):
    from sftbuild.validate import pipeline

    started = []
    monkeypatch.setattr(pipeline, "triton_gate", lambda task: started.append(task.id) or {"ok": True})
    twin = next(c for c in cases() if c.name == "twin_relu_triton").record["code"]
    solution = "import triton\nk = async_compile.triton('k', '''\n@triton.jit\ndef k(x):\n    pass\n''')\n"
    for i, code in enumerate([twin, solution, "import torch\n", "def broken(:\n  jit"]):
        pipeline.compile_any({"id": str(i), "language": "triton", "kind": "triton_op", "code": code, "cache_dir": "/nonexistent"})
    assert started == ["0", "3"]  # the kernel module, and the unparsable one (the gate names its error)


HONEST_TRITON = '''
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _ce_kernel(logits, loss, n, BLOCK: tl.constexpr):
    pass


def _mask(x, lengths):
    return torch.where(torch.arange(x.shape[-1]) < lengths[:, None], x, 0.0)


def fused_linear_cross_entropy(x, w, target):
    low = torch.is_autocast_enabled()
    logits = F.linear(x, w)
    loss = torch.empty(x.shape[0], dtype=torch.float32)
    _ce_kernel[(x.shape[0],)](logits, loss, logits.shape[-1], BLOCK=1024)
    return loss
'''


def test_reading_autocast_a_mask_helper_and_a_fused_wrappers_linear_are_left_to_the_work_check():
    assert static.scan(HONEST_TRITON, "triton") == []
    switched = HONEST_TRITON.replace("low = torch.is_autocast_enabled()", "torch.set_autocast_enabled(True)")
    assert [f.check for f in static.scan(switched, "triton")] == ["precision_flags"]
    matmul = HONEST_TRITON.replace("F.linear(x, w)", "torch.matmul(x, w.t())")
    assert [f.check for f in static.scan(matmul, "triton")] == ["torch_does_the_work"]
