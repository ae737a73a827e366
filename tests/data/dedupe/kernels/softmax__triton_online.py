import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(out_ptr, in_ptr, stride, N, TILE: tl.constexpr):
    """Softmax over long rows in tiles, with a running maximum and rescaled sum."""
    r = tl.program_id(0)
    base = in_ptr + r * stride
    m_i = tl.full([TILE], float("-inf"), tl.float32)
    l_i = tl.zeros([TILE], tl.float32)
    for start in range(0, N, TILE):
        cols = start + tl.arange(0, TILE)
        v = tl.load(base + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_i, v)
        l_i = l_i * tl.exp(m_i - m_new) + tl.exp(v - m_new)
        m_i = m_new
    m = tl.max(m_i, 0)
    l = tl.sum(l_i * tl.exp(m_i - m), 0)
    for start in range(0, N, TILE):
        cols = start + tl.arange(0, TILE)
        v = tl.load(base + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + r * stride + cols, tl.exp(v - m) / l, mask=cols < N)
