"""torch_in_host: ATen ops, cuBLAS, cuDNN or thrust doing the work inside the CUDA host code.

An `#include` is never a finding, nor is a library's bookkeeping (handles, descriptors, settings,
status checks): only a call that computes, e.g. `cublasSgemm(`, `cudnnConvolutionForward(`,
`thrust::sort(`, `cub::DeviceReduce::Sum(`.
"""
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


# library entry points that only manage state: handles, descriptors, settings, status, workspace
LIBRARY_BOOKKEEPING = re.compile(r"^(?:cublas|cublasLt|cudnn)(?:Create|Destroy|Set|Get|Check|Status|Version|"
                                 r"Init|LoggerSet|MatmulDescCreate|MatmulDescDestroy|MatmulDescSetAttribute|"
                                 r"MatmulPreference|MatrixLayout|MatmulAlgoGetHeuristic)\w*$|Check$|Status\w*$")
LIBRARY_CALL = re.compile(r"(?<![\w.:])(cublas\w+|cudnn\w+)\s*\(|"
                          r"\b(thrust::(?:sort\w*|reduce\w*|transform\w*|inclusive_scan\w*|exclusive_scan\w*|"
                          r"inner_product|count\w*|unique\w*|copy_if|remove_if|partition\w*|max_element|"
                          r"min_element|minmax_element|merge\w*|gather|scatter\w*|for_each\w*|adjacent_difference|"
                          r"stable_sort\w*|set_\w+))\s*\(|"
                          r"\b(cub::Device\w+::\w+)\s*\(|\b(cutlass::gemm)\b")


def library_call(code: str) -> str | None:
    """The first call in `code` into a library that computes a result (not an include, not bookkeeping)."""
    defined = set(re.findall(r"\b(?:void|int|cublasStatus_t|cudnnStatus_t)\s+(\w+)\s*\([^;{]*\)\s*\{", code))
    for m in LIBRARY_CALL.finditer(re.sub(r"(?m)^[ \t]*#[ \t]*include[^\n]*", "", code)):
        name = next(g for g in m.groups() if g)
        if m.group(1) and (name in defined or LIBRARY_BOOKKEEPING.search(name)):
            continue
        return name
    return None


@STATIC_CHECKS.register
class TorchInHost(StaticCheck):
    """ATen ops, cuBLAS or cuDNN doing the work inside the CUDA host code."""

    name = "torch_in_host"
    version = 2  # reads the shared kernel view: string literals kept whole when comments go
    order = 20

    def check(self, src):
        code = src.cuda
        # device code may call at:: device helpers (at::_isnan); only host code can hand work to torch
        for m in re.finditer(r"\b(?:at|torch)::((?:\w+::)*)(\w+)\s*\(", host_only(code)):
            ns, fn = m.group(1), m.group(2)
            if fn not in TORCH_ALLOWED and not any(p.rstrip(":") in TORCH_ALLOWED for p in ns.split("::") if p):
                yield self.found("cheat", f"{m.group(0).rstrip('(')}: torch computes the result, not the kernel")
                return
        m = library_call(code)
        if m:
            yield self.found("cheat", f"{m}: a library computes the result, not the kernel")
            return
        if src.language == "kernelbench" or "torch::Tensor" in code or "at::Tensor" in code:
            m = re.search(TENSOR_METHOD_CHEATS, host_only(code))
            if m:
                yield self.found("cheat", f"tensor method {m.group(0).strip(' .(')} in host code: torch does the work")
