"""ATen kernels launched and fed as torch itself would: the launch grid of the vectorized elementwise kernel
is its own tile's (no surplus block), and batch_norm_gather_stats' counts stay exact in their dtype.

Both were false rejects of torch's own kernels on an H200: a surplus block of
`vectorized_elementwise_kernel` reads its negative `remaining` as a full tile (the tail test compares it
with an unsigned `io_block_work_size()`) and stores past the output; `batch_norm_reduce_statistics_kernel`
adds its counts up in their dtype, so 257 bfloat16 groups drifted by percents from the exact reference.
"""
import re

import torch

from sftbuild import ops
from sftbuild.ops import special
from sftbuild.ops.norm import GATHER_MAX_GROUPS, exact_integers
from sftbuild.ops import fits
from sftbuild.record import Record
from sftbuild.trial import harness as H
from sftbuild.trial import sizes

# the helpers torch >= 2.6 defines beside the kernel (CUDALoops.cuh), and the kernel's tail test
NEW = """namespace at::native {
template <int io_sizes> constexpr auto elems_per_thread() { return io_sizes == 1 ? 16 : 8; }
template <int io_sizes> constexpr auto io_block_work_size() { return num_threads() * elems_per_thread<io_sizes>(); }
template <typename func_t> constexpr auto calc_io_size() { return 8; }
template <int vec_size, typename func_t, typename array_t>
__global__ void vectorized_elementwise_kernel(int N, func_t f, array_t data) {
  constexpr auto io_size = calc_io_size<func_t>();
  int remaining = N - io_block_work_size<io_size>() * blockIdx.x;
  if (remaining < io_block_work_size<io_size>()) {}
}
}
"""
# an older release: thread_constants.h's block_work_size() is the step
OLD = """namespace at::native {
template <int vec_size, typename func_t, typename array_t>
__global__ void vectorized_elementwise_kernel(int N, func_t f, array_t data) {
  int remaining = N - block_work_size() * blockIdx.x;
}
}
"""


def _render(code, form="vectorized"):
    rec = Record(language="cuda", code=code, source="torch-aten",
                 entry={"kernels": ["vectorized_elementwise_kernel"], "include_sets": ["torch"]},
                 binding={"op": "relu", "harness": "aten_elementwise", "harness_args": {"form": form, "vec": 4}})
    return H.render(rec, H.checks(rec.binding)[0], ["float32"])


def _per_block(src):
    return re.search(r"const int per_block = ([^;]*);", src).group(1)


def test_the_vectorized_grid_is_the_kernels_own_tile():
    """One block per io_block_work_size() of the functor, as ATen's launch_vectorized_kernel: 4 elements
    per thread (the old fixed step) launched twice the blocks a float ReLU needs."""
    assert _per_block(_render(NEW)) == "(int)at::native::io_block_work_size<at::native::calc_io_size<Relu<T>>()>()"
    assert _per_block(_render(OLD)) == "(int)block_work_size()"
    unrolled = ("template <typename func_t, typename array_t, int elems_per_thread, typename inp_calc_t, "
                "typename out_calc_t, typename loader_t, typename storer_t>\n__global__ void "
                "vectorized_elementwise_kernel(int N, func_t f, array_t data) {}\n")
    assert _per_block(_render(unrolled, form="unrolled")) == "4 * (int)num_threads()"  # the elems_per_thread it passes


def test_mentions_names_not_members_or_longer_names():
    assert H.mentions(NEW, "io_block_work_size") and H.mentions(NEW, "calc_io_size")
    assert not H.mentions("x.io_block_work_size(); my_calc_io_size_t", "io_block_work_size")
    assert not H.mentions("my_calc_io_size_t", "calc_io_size")


def test_gather_counts_add_up_exactly_in_their_dtype():
    """ATen sums counts in their own dtype: a trial's total stays within the dtype's exact integers."""
    op = ops.get("batch_norm_gather_stats")
    assert (exact_integers("bfloat16"), exact_integers("float16")) == (256, 2048)
    for dtype in ("bfloat16", "float16", "float32"):
        for shape in [*op.shape_pool, (GATHER_MAX_GROUPS, 5)]:
            counts = special.trial_inputs(op, shape, dtype, 0, dict(op.params))[2]
            assert counts.dtype == ops.pools.TORCH_DTYPES[dtype] and counts.min() >= 1
            assert counts.double().sum() <= exact_integers(dtype), (dtype, shape)
            running = torch.zeros((), dtype=counts.dtype)
            for c in counts:  # the kernel's running count, rounded to the dtype at every step
                running = running + c
            assert running.item() == counts.double().sum().item()


def test_gather_stats_grows_channels_not_groups():
    """The grown shape past the grid caps widens C (the kernel's parallel axis); groups stay within the
    counts' exact range, drawn or grown."""
    op = ops.get("batch_norm_gather_stats")
    cons = op.constraints_with({})
    assert not fits((GATHER_MAX_GROUPS + 1, 3), cons) and fits((GATHER_MAX_GROUPS, 3), cons)
    grown = sizes.grow_shape((3, 4099), cons)
    assert grown[0] == 3 and grown[1] * 3 >= sizes.past_caps()
    assert sizes.grow_shape((3, 4099), {})[0] == 257  # without the op's bound: the false reject's shape
    assert op.constraints_with({"max_cols": 8}) == {"max_dims": {0: GATHER_MAX_GROUPS}, "max_cols": 8}


def test_max_dims_bounds_drawn_and_grown_shapes():
    cons = {"max_dims": {"1": 10}}  # keys may come back from JSON as strings
    assert fits((100, 10), cons) and not fits((1, 11), cons)
    assert sizes.grow_shape((4, 10), cons)[1] == 10
    assert sizes.grow_shape((4, 10), {"max_dims": {0: 4, 1: 10}}) is None
