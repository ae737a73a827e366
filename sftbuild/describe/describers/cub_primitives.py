from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class CubPrimitives(Describer):
    """CUB block and warp primitives: reduce, scan, radix and merge sort."""
    name = "cub_primitives"
    version = 1
    phrase = {"en": "CUB block primitives", "zh": "CUB块级原语"}
    claim = r"(?<![A-Za-z])CUB(?![A-Za-z])"

    def cuda(self, s):
        return s.has("cub", "BlockReduce", "BlockScan", "WarpReduce", "BlockRadixSort", "WarpMergeSort")
