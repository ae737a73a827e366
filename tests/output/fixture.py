"""A fixture workspace for export tests, built in code: no GPU, no compiler, no network.

Records of every kind (op-bound CUDA, op-bound Triton, KernelBench pairs, Inductor kernels),
described by the real describe stage; validate and dedupe results written as those stages
would write them: GPU verdicts with their environment, CPU-interpreter verdicts, a drop and
a record still waiting for a GPU.
"""
from __future__ import annotations

from sftbuild.config import Config
from sftbuild.context import Context
from sftbuild.producers import producers
from sftbuild.describe import stage as describe_stage
from sftbuild.executor import LocalExecutor
from sftbuild.harvest import kernelbench as KB
from sftbuild.record import Record
from sftbuild.store import Store

GPU_ENV = {"gpu": "NVIDIA H200", "driver": "570.86.15", "cuda": "12.8", "torch": "2.11.0", "triton": "3.3.0"}

CUDA = """__global__ void relu_kernel{i}(const float* __restrict__ x, float* __restrict__ y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] * {i}.0f / {i}.0f : 0.f;
}}
"""
TRITON = """import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel{i}(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def add(a, b):
    out = torch.empty_like(a)
    add_kernel{i}[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
    return out
"""
REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * {i}


N = 4097


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""
SOLUTION = """import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def scaled_relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * {i}, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        scaled_relu[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
"""
INDUCTOR = """@triton.jit
def triton_poi_fused_mul_relu_{i}(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + (xindex), xmask)
    tmp1 = tl.maximum(0, tmp0) * {i}
    tl.store(out_ptr0 + (xindex), tmp1, xmask)
"""


def records() -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {"cuda": [], "triton": [], "kernelbench": [], "inductor": []}
    for i in range(1, 7):
        out["cuda"].append(Record(
            language="cuda", code=CUDA.format(i=i), source="llmc", entry={
                "kernels": [f"relu_kernel{i}"], "params": ["const float* __restrict__ x", "float* __restrict__ y",
                                                          "int n"]},
            binding={"kind": "op", "op": "relu", "how": "manifest", "dtypes": ["float32"]},
            provenance={"source_kind": "local", "path": f"relu{i}.cu", "lines": [1, 4], "license": "MIT",
                        "url": "https://github.com/karpathy/llm.c"}))
    for i in range(1, 5):
        out["triton"].append(Record(
            language="triton", code=TRITON.format(i=i), source="liger", entry={
                "kernels": [f"add_kernel{i}"], "params": ["a_ptr", "b_ptr", "out_ptr", "n", "BLOCK"]},
            binding={"kind": "op", "op": "add", "how": "manifest"},
            provenance={"source_kind": "pip", "path": f"add{i}.py", "lines": [1, 16], "license": "BSD-2-Clause",
                        "package": "liger-kernel", "version": "0.8.5"}))
    for i in range(1, 4):
        out["kernelbench"].append(KB.pair_record("kb", SOLUTION.format(i=i), REFERENCE.format(i=i),
                                                 f"scaled_relu_{i}_new", {"path": f"level1/{i}.py",
                                                                          "license": "MIT"}))
    for i in range(1, 4):
        out["inductor"].append(Record(
            language="triton", code=INDUCTOR.format(i=i), source="torch-inductor", entry={
                "kernels": [f"triton_poi_fused_mul_relu_{i}"], "params": [], "launch_sites": []},
            binding={"kind": "inductor", "how": "exact", "program": f"scaled_relu_{i}",
                     "reference": REFERENCE.format(i=i)},
            provenance={"source_kind": "torch-inductor", "path": f"scaled_relu_{i}", "lines": [1, 8],
                        "license": "BSD-3-Clause", "package": "torch", "version": "2.11.0"}))
    return out


def gpu_payload(i: int) -> dict:
    return {"trials": [{"shape": [7 * i], "dtype": "float32", "ok": True, "max_rel": 1e-7 * i},
                       {"shape": [1000], "dtype": "float16", "ok": True, "max_rel": 2e-4}],
            "errors": {"max_abs": 1e-6 * i, "max_rel": 2e-4, "norm_rel": 1e-5},
            "timing": {"main": {"eager_ms": {"median": 0.02}, "candidate_ms": {"median": 0.01 * i}}},
            "speedup": 2.0 / i, "env": GPU_ENV}


def cpu_payload() -> dict:  # what a CPU-interpreter run stores: trials, errors, no env, no timing
    return {"trials": [{"shape": [31], "dtype": "float32", "ok": True}], "errors": {"max_abs": 0.0}}


def build(ws) -> dict[str, list[Record]]:
    """The fixture workspace at `ws`: returns its records by kind (the Triton op records are
    interpreter-only; one CUDA record is dropped as incorrect, one waits for a GPU)."""
    recs = records()
    everything = [r for rs in recs.values() for r in rs]
    store = Store(ws)
    store.add_records(everything)
    store.set_stage_config("harvest", "h", {}, producers("harvest"))
    store.put_results([(r.id, "harvest", "h", "ok", None, {}) for r in everything])
    store.set_stage_config("bind", "b", {}, producers("bind"))
    store.put_results([(r.id, "bind", "b", "ok", None, {}) for r in everything])
    ctx = Context(store=store, config=Config(), executor=LocalExecutor(cpu_workers=1, progress=False),
                  echo=lambda s: None, progress=False)
    describe_stage.run(ctx)
    ctx.executor.close()
    store.set_stage_config("validate", "v", {}, producers("validate"))  # verdicts of this validator
    cuda = recs["cuda"]
    for i, r in enumerate(everything, 1):
        if r is cuda[-1]:
            store.put_verdict(r.id, "validate", "v", "waiting", "needs_gpu", {}, {})
        elif r is cuda[-2]:
            store.put_verdict(r.id, "validate", "v", "dropped", "incorrect", {"detail": "max_rel 0.3"}, {})
        elif r in recs["triton"]:
            store.put_verdict(r.id, "validate", "v", "ok", None, cpu_payload(), {"torch": "2.13.0", "gpus": []})
        else:
            store.put_verdict(r.id, "validate", "v", "ok", None, gpu_payload(i), {"nvcc": "release 12.8, V12.8.93"})
    store.set_stage_config("dedupe", "d", {}, producers("dedupe"))
    passed = store.done_ids("validate", "v", statuses=("ok",))
    store.put_results([(r.id, "dedupe", "d", "ok", None, {}) for r in everything if r.id in passed])
    store.close()
    return recs
