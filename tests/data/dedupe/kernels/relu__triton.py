import triton
import triton.language as tl


@triton.jit
def leaky_relu_kernel(src, dst, n, slope, BLOCK: tl.constexpr):
    """Leaky ReLU: x if x > 0 else slope * x."""
    start = tl.program_id(0) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    valid = offs < n
    v = tl.load(src + offs, mask=valid, other=0.0)
    out = tl.where(v > 0, v, v * slope)
    tl.store(dst + offs, out, mask=valid)
