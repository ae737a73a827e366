from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class GridStrideLoop(Describer):
    """A grid-stride loop: a for loop stepping by `gridDim`, or torch's `CUDA_KERNEL_LOOP`."""
    name = "grid_stride_loop"
    version = 1
    phrase = {"en": "a grid-stride loop", "zh": "grid-stride循环"}
    claim = r"grid[- ]stride"

    def cuda(self, s):
        return any("gridDim" in loop.split(";")[-1] for loop in s.loops) or s.has_prefix("CUDA_KERNEL_LOOP")
