"""Python GPU DSLs other than Triton (CuTe DSL, Gluon, TileLang, numba, cupy, ...) are never stored
as Triton: each kernel is listed as `unsupported_dsl` with its DSL named; Triton kernels still are."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.harvest import stage
from sftbuild.harvest.triton_extract import count_jit, extract_kernels

TRITON = '''import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * 3, mask=offs < n)


def scale(x):
    scale_kernel[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
'''

CUTE = '''import cutlass
import cutlass.cute as cute


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gC[bidx * 128 + tidx] = gA[bidx * 128 + tidx] + gB[bidx * 128 + tidx]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    add_kernel(mA, mB, mC).launch(grid=(mA.shape[0] // 128, 1, 1), block=(128, 1, 1))
'''

CUTE_FROM = '''from cutlass import cute


@cute.jit
def copy(src: cute.Tensor, dst: cute.Tensor):
    for i in range(cute.size(src)):
        dst[i] = src[i]
'''

GLUON = '''import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    gl.store(y_ptr + offs, gl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy(x, y):
    copy_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
'''

TILELANG = '''import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            T.clear(C)
    return main
'''

OTHERS = '''import cupy as cp
import tilelang as tl
import warp as wp
from numba import cuda

RAW = cp.RawKernel(r"""extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2; }""", "k")


@cuda.jit
def numba_kernel(x):
    i = cuda.grid(1)
    x[i] *= 2


@tl.jit
def tile_fn(M):
    return M


@wp.kernel
def warp_kernel(x: wp.array(dtype=float)):
    x[wp.tid()] = 2.0
'''


def listed(src: str) -> dict[str, str]:
    kernels, others = extract_kernels(src)
    assert len(kernels) + len(others) == count_jit(src)
    return {o["detail"]: o["reason"] for o in others}


@pytest.mark.parametrize("src, expected", [
    (CUTE, {"cute_dsl: @cute.kernel add_kernel", "cute_dsl: @cute.jit add"}),
    (CUTE_FROM, {"cute_dsl: @cute.jit copy"}),
    (GLUON, {"gluon: @gluon.jit copy_kernel"}),
    (TILELANG, {"tilelang: @tilelang.jit matmul", "tilelang: @T.prim_func main"}),
    (OTHERS, {"cupy: CUDA source in a Python string (cp.RawKernel)", "numba_cuda: @cuda.jit numba_kernel",
              "tilelang: @tl.jit tile_fn", "warp: @wp.kernel warp_kernel"}),
])
def test_other_dsls_are_not_triton(src, expected):
    kernels, _ = extract_kernels(src)
    assert kernels == []
    others = listed(src)
    assert set(others) == expected and set(others.values()) == {"unsupported_dsl"}


@pytest.mark.parametrize("src", [
    TRITON,
    TRITON.replace("import triton\n", "import triton\nfrom triton import jit\n").replace("@triton.jit", "@jit"),
    TRITON.replace("import triton\n", "import triton\nfrom triton.runtime.jit import jit\n")
          .replace("@triton.jit", "@jit"),
    # a package's own re-export of triton.jit: the body speaks triton.language
    TRITON.replace("import triton\n", "import triton\nfrom .utils import jit\n").replace("@triton.jit", "@jit"),
    TRITON.replace("@triton.jit", "@tjit").replace("import triton\n", "import triton\ntjit = triton.jit\n"),
])
def test_triton_still_triton(src):
    kernels, others = extract_kernels(src)
    assert [k.name for k in kernels] == ["scale_kernel"] and others == []


def test_unresolved_jit_without_triton_is_not_guessed():
    src = "from .compiler import jit\n\n\n@jit\ndef f(x):\n    return x * 2\n"
    assert listed(src) == {"unresolved .compiler.jit: @jit f": "unsupported_dsl"}
    jax = "import jax\n\n\n@jax.jit\ndef f(x):\n    return x * 2\n"
    assert listed(jax) == {"jax: @jax.jit f": "unsupported_dsl"}


def test_mixed_file_keeps_triton_lists_the_rest():
    src = TRITON + "\n" + GLUON.replace("import triton\n", "").replace("def copy(", "def gcopy(")
    kernels, others = extract_kernels(src)
    assert [k.name for k in kernels] == ["scale_kernel"]
    assert [(o["reason"], o["detail"]) for o in others] == [("unsupported_dsl", "gluon: @gluon.jit copy_kernel")]
    assert "gluon" not in kernels[0].code


def test_harvest_skips_dsl_kernels_and_status_shows_them(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    for name, text in (("tri.py", TRITON), ("cute_ops.py", CUTE), ("gluon_ops.py", GLUON), ("tl_ops.py", TILELANG),
                       ("warp_ops.py", OTHERS)):
        (d / name).write_text(text)
    ws = tmp_path / "ws"
    runner = CliRunner()
    res = runner.invoke(main, ["harvest", "-w", str(ws), "-q", str(d)])
    assert res.exit_code == 0, res.output
    from sftbuild.store import Store

    store = Store(ws)
    try:
        recs = list(store.records())
        assert [(r.language, r.name) for r in recs] == [("triton", "scale_kernel")]
        dsl = {(s["path"], s["detail"].split(":")[0]) for s in store.skips() if s["reason"] == "unsupported_dsl"}
        assert dsl == {("cute_ops.py", "cute_dsl"), ("gluon_ops.py", "gluon"), ("tl_ops.py", "tilelang"),
                       ("warp_ops.py", "cupy"), ("warp_ops.py", "numba_cuda"), ("warp_ops.py", "tilelang"),
                       ("warp_ops.py", "warp")}
    finally:
        store.close()
    res = runner.invoke(main, ["status", "-w", str(ws)])
    assert res.exit_code == 0 and "unsupported_dsl" in res.output, res.output


def test_stage_run_records_dsl_skips(ctx, tmp_path):
    d = tmp_path / "only_cute"
    d.mkdir()
    (d / "k.py").write_text(CUTE)
    stats = stage.run(ctx, [str(d)])
    assert stats["sources"][str(d)] == 0 and not list(ctx.store.records())
    assert {s["item"] for s in ctx.store.skips() if s["reason"] == "unsupported_dsl"} == {"line 5", "line 12"}


def test_decorator_imported_under_another_name():
    src = "from cutlass.cute import kernel as device_kernel\n\n\n@device_kernel\ndef k(x):\n    x[0] = 1\n"
    assert listed(src) == {"cute_dsl: @device_kernel k": "unsupported_dsl"}
