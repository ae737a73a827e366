"""One validation pass with GPU faults among correct kernels: every correct kernel still passes.

The pass interleaves five faults (a hang, an illegal address, a misaligned access, a device-side
assert, GPU memory exhaustion) among 35 correct kernels (30 Triton wrappers bound to registered
ops, 5 KernelBench pairs with CUDA through load_inline), in one `pipeline.validate` call on one
GPU worker, so the samples run in the order given. Each fault must end as one dropped verdict
with a reason in its expected set; each correct kernel must be `ok`. The correct kernel that runs
right after a fault, in the same worker slot, is the proof that no worker state leaked.

CPU: the case list itself (counts, fault kinds, distinct names and code, registry ops, and no
static finding that would stop a fault before it reaches the GPU); marked slow, the correct Triton
kernels pass in the interpreter; marked sweep, every CUDA sample builds and waits for a GPU.
Run on a GPU machine with:  pytest -m gpu -s -n 0 tests/sandbox/test_gpu_fault_pass.py
"""
from __future__ import annotations

import dataclasses
import os
import time

import pytest

from sftbuild import ops
from sftbuild.config import ValidateConfig
from sftbuild.executor import LocalExecutor
from sftbuild.record import Record
from sftbuild.validate import pipeline, static
from tests.redteam import cases as rt

# ---- correct Triton wrappers, one per registered elementwise op ------------------------------

TRITON_UNARY = '''
import torch
import triton
import triton.language as tl


@triton.jit
def {op}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    tl.store(y_ptr + offs, ({expr}).to(y_ptr.dtype.element_ty), mask=mask)


def triton_{op}(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    {op}_kernel[(triton.cdiv(n, {block}),)](xc, y, n, BLOCK={block}, num_warps={warps})
    return y
'''
TRITON_BINARY = '''
import torch
import triton
import triton.language as tl


@triton.jit
def {op}_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    tl.store(y_ptr + offs, ({expr}).to(y_ptr.dtype.element_ty), mask=mask)


def triton_{op}(a, b):
    ac, bc = a.contiguous(), b.contiguous()
    y = torch.empty_like(ac)
    n = ac.numel()
    {op}_kernel[(triton.cdiv(n, {block}),)](ac, bc, y, n, BLOCK={block}, num_warps={warps})
    return y
'''
# tanh through the sigmoid, so no libdevice name is needed: tanh(t) = 2 sigmoid(2t) - 1
_TANH = "(2.0 * tl.sigmoid(2.0 * ({})) - 1.0)"
_SOFTPLUS = "tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))"  # F.softplus: beta 1, threshold 20
UNARY = {  # op: the fp32 expression of x
    "relu": "tl.maximum(x, 0.0)",
    "abs": "tl.abs(x)",
    "neg": "-x",
    "square": "x * x",
    "exp": "tl.exp(x)",
    "log": "tl.log(x)",
    "log1p": "tl.log(1.0 + x)",
    "sqrt": "tl.sqrt(x)",
    "rsqrt": "tl.rsqrt(x)",
    "reciprocal": "1.0 / x",
    "sigmoid": "tl.sigmoid(x)",
    "tanh": _TANH.format("x"),
    "silu": "x * tl.sigmoid(x)",
    "gelu": "0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))",
    "gelu_tanh": "0.5 * x * (1.0 + " + _TANH.format("0.7978845608028654 * (x + 0.044715 * x * x * x)") + ")",
    "sin": "tl.sin(x)",
    "cos": "tl.cos(x)",
    "erf": "tl.erf(x)",
    "softplus": _SOFTPLUS,
    "leaky_relu": "tl.where(x > 0, x, 0.01 * x)",
    "elu": "tl.where(x > 0, x, tl.exp(x) - 1.0)",
    "hardswish": "x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",
    "hardsigmoid": "tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",
    "mish": "x * " + _TANH.format(_SOFTPLUS),
}
BINARY = {
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "div": "a / b",
    "maximum": "tl.maximum(a, b)",
    "minimum": "tl.minimum(a, b)",
}
# each kernel its own block size and warp count, so the pass also compiles 30 different launch shapes
LAUNCHES = [(128, 1), (256, 2), (512, 4), (1024, 4), (2048, 8), (1024, 8)]


def triton_fp32(code: str, op: str) -> dict:
    """An op-bound Triton record checked in fp32 on contiguous inputs only (the pass is about faults)."""
    rec = rt.triton(code, op)
    rec["binding"].update(dtypes=["float32"], layouts=["contiguous"])
    return rec


# ---- correct CUDA kernels through load_inline (KernelBench pairs) -----------------------------

CUDA_UNARY_KERNEL = '''
__global__ void {name}_kernel(const float* x, float* y, long n) {{
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {{ float v = x[i]; y[i] = {expr}; }}
}}
'''
CUDA_UNARY_HOST = '''
torch::Tensor run(torch::Tensor x) {{
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  long n = xc.numel();
  {name}_kernel<<<(n + {block} - 1) / {block}, {block}>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}}
'''


def cuda_unary(name: str, expr: str, block: int = 256, kernel: str = CUDA_UNARY_KERNEL) -> str:
    return rt.inline(f"fp_{name}", kernel.format(name=name, expr=expr), CUDA_UNARY_HOST.format(name=name, block=block))


def reference(torch_expr: str) -> str:
    """The KernelBench relu reference with another forward."""
    return rt.REF_RELU.replace("return torch.relu(x)", f"return {torch_expr}")


# ---- the faults ---------------------------------------------------------------------------

# a volatile flag that is never cleared: the loop cannot be optimised away (it reads memory each turn)
HANG_KERNEL = '''
__device__ volatile int spin_forever = 1;
__global__ void {name}_kernel(const float* x, float* y, long n) {{
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  while (spin_forever) {{ }}
  if (i < n) {{ float v = x[i]; y[i] = {expr}; }}
}}
'''
# a write through a pointer no allocation owns
ILLEGAL_KERNEL = '''
__global__ void {name}_kernel(const float* x, float* y, long n) {{
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  float* nowhere = reinterpret_cast<float*>(0x10);
  if (i < n) nowhere[i] = x[i];
  if (i < n) {{ float v = x[i]; y[i] = {expr}; }}
}}
'''
# a float4 read one byte past an allocation's start: 16-byte loads need 16-byte alignment
MISALIGNED_KERNEL = '''
__global__ void {name}_kernel(const float* x, float* y, long n) {{
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  const float4* odd = reinterpret_cast<const float4*>(reinterpret_cast<const char*>(x) + 1);
  if (i < n) {{ float4 w = odd[0]; float v = x[i]; y[i] = {expr} + 0.f * (w.x + w.y + w.z + w.w); }}
}}
'''
# assert is compiled in whatever the build defines
ASSERT_KERNEL = '''
#undef NDEBUG
#include <assert.h>
__global__ void {name}_kernel(const float* x, float* y, long n) {{
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  assert(n < 0);
  if (i < n) {{ float v = x[i]; y[i] = {expr}; }}
}}
'''
# the wrapper holds 8 GiB blocks until the GPU has no more; its kernel would be right
TRITON_OOM = TRITON_UNARY.format(op="relu", expr=UNARY["relu"], block=1024, warps=4).replace(
    "def triton_relu(x):\n",
    "_held = []\n\n\ndef triton_relu(x):\n"
    "    while True:\n"
    "        _held.append(torch.empty(1 << 33, dtype=torch.uint8, device=x.device))\n")

TIMEOUT = ("timeout",)
BAD_ADDRESS = ("illegal_address", "cuda_error", "crash", "memcheck")
ASSERTED = ("cuda_error", "crash", "illegal_address")
OOM = ("oom", "crash", "cuda_error")


@dataclasses.dataclass
class Sample:
    name: str
    record: dict
    expect: tuple[str, ...]  # ("ok",) for a correct kernel; else the reasons that count as caught
    op: str = ""  # the registered op a correct kernel computes
    fault: str = ""  # hang, illegal_address, misaligned, device_assert, oom

    @property
    def correct(self) -> bool:
        return self.expect == ("ok",)


def correct_samples() -> list[Sample]:
    """30 Triton wrappers (24 unary, 6 binary ops) and 5 CUDA KernelBench pairs, each its own kernel."""
    out = []
    for k, (op, expr) in enumerate(UNARY.items()):
        block, warps = LAUNCHES[k % len(LAUNCHES)]
        code = TRITON_UNARY.format(op=op, expr=expr, block=block, warps=warps)
        out.append(Sample(f"triton_{op}", triton_fp32(code, op), ("ok",), op))
    for k, (op, expr) in enumerate(BINARY.items()):
        block, warps = LAUNCHES[(k + 3) % len(LAUNCHES)]
        code = TRITON_BINARY.format(op=op, expr=expr, block=block, warps=warps)
        out.append(Sample(f"triton_{op}", triton_fp32(code, op), ("ok",), op))
    cuda = [
        ("sigmoid", "1.f / (1.f + expf(-v))", 128, "torch.sigmoid(x)"),
        ("tanh", "tanhf(v)", 512, "torch.tanh(x)"),
        ("softplus", "v > 20.f ? v : log1pf(expf(v))", 1024, "torch.nn.functional.softplus(x)"),
    ]
    for op, expr, block, ref in cuda:
        out.append(Sample(f"cuda_{op}", rt.kb(cuda_unary(op, expr, block), reference(ref)), ("ok",), op))
    out.append(Sample("cuda_row_sum", rt.kb(rt.inline("fp_rowsum", rt.ROWSUM_KERNEL, rt.ROWSUM_HOST), rt.REF_ROWSUM),
                      ("ok",), "row_sum"))
    out.append(Sample("cuda_matmul", rt.kb(rt.inline("fp_mm", rt.MATMUL_KERNEL, rt.MATMUL_HOST, "a, b"),
                                           rt.REF_MATMUL), ("ok",), "matmul"))
    return out


def fault_samples() -> list[Sample]:
    """One of each fault, each in a kernel that would otherwise compute a correct relu."""
    relu = "v > 0.f ? v : 0.f"
    ref = reference("torch.relu(x)")
    return [
        Sample("fault_hang", rt.kb(cuda_unary("hang", relu, kernel=HANG_KERNEL), ref), TIMEOUT, fault="hang"),
        Sample("fault_illegal_address", rt.kb(cuda_unary("illegal", relu, kernel=ILLEGAL_KERNEL), ref), BAD_ADDRESS,
               fault="illegal_address"),
        Sample("fault_misaligned", rt.kb(cuda_unary("misaligned", relu, kernel=MISALIGNED_KERNEL), ref), BAD_ADDRESS,
               fault="misaligned"),
        Sample("fault_device_assert", rt.kb(cuda_unary("assert", relu, kernel=ASSERT_KERNEL), ref), ASSERTED,
               fault="device_assert"),
        Sample("fault_oom", triton_fp32(TRITON_OOM, "relu"), OOM, fault="oom"),
    ]


FAULT_KINDS = ("hang", "illegal_address", "misaligned", "device_assert", "oom")


def fault_pass() -> list[Sample]:
    """Runs of five to seven correct kernels with a fault between runs, correct kernels first and last;
    the kernel right after a fault is a CUDA one after the first, third and fifth, a Triton one otherwise."""
    correct, faults = correct_samples(), fault_samples()
    cuda = [s for s in correct if s.name.startswith("cuda_")]
    tri = [s for s in correct if not s.name.startswith("cuda_")]
    runs = [[] for _ in range(len(faults) + 1)]
    for k, s in enumerate(tri):
        runs[k % len(runs)].append(s)
    for run, s in zip((1, 3, 5), cuda):  # opens the run
        runs[run].insert(0, s)
    for run, s in zip((2, 4), cuda[3:]):  # closes it
        runs[run].append(s)
    out = list(runs[0])
    for f, run in zip(faults, runs[1:]):
        out += [f, *run]
    return out


# ---- CPU: the case list ---------------------------------------------------------------------

def test_the_fault_pass_is_built_as_the_issue_asks():
    samples = fault_pass()
    correct = [s for s in samples if s.correct]
    faults = [s for s in samples if not s.correct]
    assert len(correct) >= 30
    assert sorted(s.fault for s in faults) == sorted(FAULT_KINDS)
    assert len({s.name for s in samples}) == len(samples)
    assert len({s.record["code"] for s in samples}) == len(samples), "two samples share their code"
    for s in correct:
        assert ops.get(s.op).name == s.op
        if s.record["binding"]["kind"] == "op":
            assert s.record["binding"]["op"] == s.op
    # interleaved: no fault first, none last, never two in a row
    kinds = [s.correct for s in samples]
    assert kinds[0] and kinds[-1] and all(a or b for a, b in zip(kinds, kinds[1:]))
    # nothing stops a sample before it runs: every fault must reach the GPU
    for s in samples:
        found = static.scan(s.record["code"], s.record["language"], None, {})
        assert found == [], (s.name, found)


def test_every_inline_extension_has_its_own_name():
    names = [line.split('name="')[1].split('"')[0] for s in fault_pass() for line in s.record["code"].splitlines()
             if "load_inline(" in line]
    assert len(names) == len(set(names)) == 9


def _without_gpu(samples, tmp_path, monkeypatch) -> dict:
    """name -> (status, reason, detail) from a pass with no GPU: Triton runs in the interpreter on
    small sizes (as in tests/validate/test_validate_redteam.py), CUDA builds and then waits."""
    gpu_task = pipeline.gpu_task
    monkeypatch.setattr(pipeline, "gpu_task", lambda *a: dataclasses.replace(gpu_task(*a), max_numel=1 << 16))
    records = [Record(source="fault-pass", **s.record) for s in samples]
    by_id = {r.id: s.name for r, s in zip(records, samples)}
    cfg = ValidateConfig(shapes=2, seeds=1, sample_timeout=300, memcheck="off", timing=False)
    with LocalExecutor(cpu_workers=2, gpus="none", progress=False) as ex:
        return {by_id[rec.id]: (status, reason, str(payload.get("detail") or payload.get("log") or "")[:300])
                for rec, status, reason, payload in pipeline.validate(records, cfg, ex, str(tmp_path))}


@pytest.mark.sweep  # all 30 kernels in the Triton interpreter: some minutes on two cores
def test_the_correct_triton_kernels_pass_in_the_interpreter(tmp_path, monkeypatch):
    # the pass's correct kernels are correct on their own: on the GPU, a failure of one is the fault's
    samples = [s for s in correct_samples() if s.record["language"] == "triton"]
    got = _without_gpu(samples, tmp_path, monkeypatch)
    assert {n: v for n, v in got.items() if v[0] != "ok"} == {}
    assert len(got) == len(samples) == 30


@pytest.mark.sweep  # nine extensions built against torch's headers
@pytest.mark.nvcc
def test_every_cuda_sample_builds_and_waits_for_a_gpu(tmp_path, monkeypatch):
    samples = [s for s in fault_pass() if s.record["language"] == "kernelbench"]
    got = _without_gpu(samples, tmp_path, monkeypatch)
    assert {n: v for n, v in got.items() if v[:2] != ("waiting", "needs_gpu")} == {}
    assert len(got) == len(samples) == 9


# ---- GPU: the pass ------------------------------------------------------------------------------

class OrderedExecutor(LocalExecutor):
    """LocalExecutor whose compile results come back in the order given (the pipeline gathers them
    all before any GPU run, so only the GPU order changes: the order of the pass), and which notes
    how long the GPU phase took."""

    gpu_seconds = 0.0

    def map_cpu(self, fn, items, desc="", unit="items"):
        items = list(items)
        done = {id(item): res for item, res in super().map_cpu(fn, items, desc, unit)}
        yield from ((item, done[id(item)]) for item in items if id(item) in done)

    def map_gpu(self, fn, items, timeout, desc="", per_gpu=1, unit="items"):
        t0 = time.monotonic()
        try:
            yield from super().map_gpu(fn, items, timeout, desc, per_gpu, unit)
        finally:
            self.gpu_seconds += time.monotonic() - t0


BOUND_S = 480  # the whole pass, builds included; a hang is cut in about 11 s (sftbuild.trial.deadline)


@pytest.mark.gpu
def test_faults_interleaved_with_correct_kernels_in_one_pass(tmp_path):
    samples = fault_pass()
    records = [Record(source="fault-pass", **s.record) for s in samples]
    by_id = {r.id: s for r, s in zip(records, samples)}
    cfg = ValidateConfig(shapes=2, seeds=1, sample_timeout=90, workers_per_gpu=1, memcheck="off", timing=False)
    ran, got = [], {}
    t0 = time.monotonic()
    with OrderedExecutor(cpu_workers=min(8, os.cpu_count() or 1), gpus="auto", progress=False) as ex:
        ex.gpus = ex.gpus[:1]  # one worker on one GPU: the samples run one after another, in order
        for rec, status, reason, payload in pipeline.validate(records, cfg, ex, str(tmp_path)):
            s = by_id[rec.id]
            ran.append(s)
            got[s.name] = ("ok" if status == "ok" else reason,
                           str(payload.get("detail") or payload.get("why") or "")[:100])
    seconds = time.monotonic() - t0

    rows, wrong = [f"{'sample':24} {'expected':44} got"], []
    for s in samples:
        outcome, detail = got.get(s.name, ("missing", ""))
        rows.append(f"{s.name:24} {'|'.join(s.expect):44} {outcome}  {'' if outcome == 'ok' else detail}")
        if outcome not in s.expect:
            wrong.append(s.name)
    correct = [s for s in samples if s.correct]
    n_ok = sum(got.get(s.name, ("",))[0] == "ok" for s in correct)
    n_caught = sum(got.get(s.name, ("",))[0] in s.expect for s in samples if not s.correct)
    after = [(s.name, ran[i + 1].name) for i, s in enumerate(ran[:-1]) if not s.correct]
    print("\n".join(rows))
    print("right after each fault: " + ", ".join(f"{f} -> {c} {got[c][0]}" for f, c in after))
    n_faults = len(samples) - len(correct)
    print(f"fault pass: {n_ok} correct ok of {len(correct)}, {n_caught} faults caught of {n_faults}, "
          f"in {seconds:.0f} s ({ex.gpu_seconds:.0f} s on the GPU)")

    assert wrong == [], wrong
    assert [s.name for s in ran] == [s.name for s in samples], "the GPU ran the samples out of order"
    # the proof that nothing leaked: the sample after each fault is a correct kernel, and it passed
    named = {s.name: s for s in samples}
    assert len(after) == len(FAULT_KINDS) and all(named[c].correct and got[c][0] == "ok" for _, c in after)
    assert seconds < BOUND_S, f"the pass took {seconds:.0f} s"
