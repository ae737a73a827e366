from sftbuild.describe.describers import DESCRIBERS, Describer

VECTOR_TYPES = ("float4", "float2", "half2", "__half2", "__nv_bfloat162", "int4", "uint4", "double2",
                "aligned_vector", "load_vector")


@DESCRIBERS.register
class VectorizedAccess(Describer):
    """Vectorised loads and stores: vector types such as `float4`, torch's `aligned_vector`, or `.v4.` in PTX."""
    name = "vectorized_access"
    version = 1
    phrase = {"en": "vectorised loads and stores", "zh": "向量化访存"}
    claim = r"vectori[sz]ed|float4|half2|向量化"

    def cuda(self, s):
        return s.has(*VECTOR_TYPES) or ".v4." in s.asm
