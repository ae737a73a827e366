# A hand-written file in the layout of Inductor output code, for parser tests.
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()

triton_poi_fused_add_relu_0 = async_compile.triton('triton_poi_fused_add_relu_0', '''
import triton
import triton.language as tl

@triton.jit
def triton_poi_fused_add_relu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + (xindex), xmask)
    tmp1 = tl.load(in_ptr1 + (xindex), xmask)
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0, tl.int32)
    tmp4 = triton_helpers.maximum(tmp3, tmp2)
    tl.store(out_ptr0 + (xindex), tmp4, xmask)
''', device_str='cuda')

async_compile.wait(globals())
del async_compile


def call(args):
    arg0_1, arg1_1, s0 = args
    buf0 = empty_strided_cuda((s0, 1024), (1024, 1), torch.float32)
    triton_poi_fused_add_relu_0.run(arg0_1, arg1_1, buf0, 1024 * s0, stream=stream0)
    return (buf0, )
