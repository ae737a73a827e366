import triton
import triton.language as tl


@triton.jit
def total_sum_atomic_kernel(inp, result, numel, CHUNK: tl.constexpr):
    # each program reduces one chunk and adds its partial sum atomically
    pid = tl.program_id(axis=0)
    idx = pid * CHUNK + tl.arange(0, CHUNK)
    part = tl.load(inp + idx, mask=idx < numel, other=0.0)
    partial = tl.sum(part.to(tl.float32), axis=0)
    tl.atomic_add(result, partial)
