// Trimmed stand-in for torch/extension.h in the CUDA translation unit of an inline extension:
// the tensor class, allocation, checks and dtype dispatch, without ATen/Context.h and the op
// library (a tenth of the parse time). The allocation functions call the same exported operator
// entry points as the generated ATen/ops headers; torch:: names alias at:: ones.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/zeros_ops.h>
#include <ATen/ops/zeros_like_ops.h>
#include <ATen/ops/ones_ops.h>
#include <ATen/ops/ones_like_ops.h>
#include <ATen/ops/full_ops.h>
#include <c10/util/Exception.h>

namespace at {
namespace sftbuild_detail {
inline ::std::optional<MemoryFormat> fmt(TensorOptions o, ::std::optional<MemoryFormat> m) {
  return c10::impl::check_tensor_options_and_extract_memory_format(o, m);
}
}  // namespace sftbuild_detail
#define SFTBUILD_OPTS(o) c10::optTypeMetaToScalarType(o.dtype_opt()), o.layout_opt(), o.device_opt(), o.pinned_memory_opt()
inline Tensor empty(IntArrayRef size, TensorOptions o = {}, ::std::optional<MemoryFormat> m = ::std::nullopt) {
  return _ops::empty_memory_format::call(c10::fromIntArrayRefSlow(size), SFTBUILD_OPTS(o), sftbuild_detail::fmt(o, m));
}
inline Tensor empty_like(const Tensor& self, TensorOptions o = {}, ::std::optional<MemoryFormat> m = ::std::nullopt) {
  return _ops::empty_like::call(self, SFTBUILD_OPTS(o), sftbuild_detail::fmt(o, m));
}
inline Tensor zeros(IntArrayRef size, TensorOptions o = {}) {
  return _ops::zeros::call(c10::fromIntArrayRefSlow(size), SFTBUILD_OPTS(o));
}
inline Tensor zeros_like(const Tensor& self, TensorOptions o = {}, ::std::optional<MemoryFormat> m = ::std::nullopt) {
  return _ops::zeros_like::call(self, SFTBUILD_OPTS(o), sftbuild_detail::fmt(o, m));
}
inline Tensor ones(IntArrayRef size, TensorOptions o = {}) {
  return _ops::ones::call(c10::fromIntArrayRefSlow(size), SFTBUILD_OPTS(o));
}
inline Tensor ones_like(const Tensor& self, TensorOptions o = {}, ::std::optional<MemoryFormat> m = ::std::nullopt) {
  return _ops::ones_like::call(self, SFTBUILD_OPTS(o), sftbuild_detail::fmt(o, m));
}
inline Tensor full(IntArrayRef size, const Scalar& value, TensorOptions o = {}) {
  return _ops::full::call(c10::fromIntArrayRefSlow(size), value, SFTBUILD_OPTS(o));
}
#undef SFTBUILD_OPTS
}  // namespace at

// torch:: is at:: plus the autograd layer, which kernels' host wrappers do not use
namespace torch {
using namespace at;  // NOLINT
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;
}  // namespace torch
