"""torch_in_host: ATen ops, cuBLAS or cuDNN doing the work inside the CUDA host code."""
from __future__ import annotations

import re

from sftbuild.validate.static import STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import host_only

# at::/torch:: names that allocate or describe tensors; anything else is torch doing the work
TORCH_ALLOWED = {
    "Tensor", "TensorOptions", "ScalarType", "Device", "DeviceType", "IntArrayRef", "Scalar", "empty",
    "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "kFloat",
    "kFloat32", "kFloat16", "kHalf", "kBFloat16", "kFloat64", "kDouble", "kInt", "kInt32", "kInt64", "kLong",
    "kCUDA", "kCPU", "kByte", "kBool", "Half", "BFloat16", "cuda", "dtype", "device", "TensorAccessor",
    "PackedTensorAccessor32", "PackedTensorAccessor64", "RestrictPtrTraits", "DefaultPtrTraits", "detail",
    "OptionalCUDAGuard", "CUDAGuard", "getCurrentCUDAStream", "check", "native", "ArrayRef", "optional",
    "nullopt", "MemoryFormat", "Layout", "kStrided", "TensorArg", "checkAllSameGPU", "acc_type", "opmath_type",
    "numeric_limits", "elementSize", "toString", "Generator", "List", "IValue", "TensorList", "autograd",
    "NoGradGuard", "AutoDispatchBelowADInplaceOrView", "randn", "rand", "arange",
}
TENSOR_METHOD_CHEATS = r"\.\s*(?:matmul|mm|bmm|addmm|baddbmm|conv\w*|softmax|log_softmax|relu|gelu|sigmoid|tanh|" \
                       r"sum|mean|max|min|norm|layer_norm|linear|einsum|cumsum|prod|var|std|exp|argmax|argmin|" \
                       r"sort|topk|pow|sqrt)\s*\("


@STATIC_CHECKS.register
class TorchInHost(StaticCheck):
    """ATen ops, cuBLAS or cuDNN doing the work inside the CUDA host code."""

    name = "torch_in_host"
    order = 20

    def check(self, src):
        code = src.cuda
        # device code may call at:: device helpers (at::_isnan); only host code can hand work to torch
        for m in re.finditer(r"\b(?:at|torch)::((?:\w+::)*)(\w+)\s*\(", host_only(code)):
            ns, fn = m.group(1), m.group(2)
            if fn not in TORCH_ALLOWED and not any(p.rstrip(":") in TORCH_ALLOWED for p in ns.split("::") if p):
                yield self.found("cheat", f"{m.group(0).rstrip('(')}: torch computes the result, not the kernel")
                return
        m = re.search(r"\b(cublas\w+|cublasLt\w+|cudnn\w+|cutlass::gemm)\b", code)
        if m:
            yield self.found("cheat", f"{m.group(1)}: a library computes the result, not the kernel")
            return
        if src.language == "kernelbench" or "torch::Tensor" in code or "at::Tensor" in code:
            m = re.search(TENSOR_METHOD_CHEATS, host_only(code))
            if m:
                yield self.found("cheat", f"tensor method {m.group(0).strip(' .(')} in host code: torch does the work")
