import re

from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class TensorCores(Describer):
    """Tensor cores: WMMA or `mma` / `wgmma` PTX in CUDA, `tl.dot` in Triton."""
    name = "tensor_cores"
    version = 1
    phrase = {"en": "tensor cores", "zh": "Tensor Core"}
    claim = r"tensor core|wmma|\b(?:wg)?mma\b"  # not the "mma" ending "gamma"

    def cuda(self, s):
        return s.has("wmma", "mma_sync", "load_matrix_sync") or bool(re.search(r"\b(w?gmma|mma)\.", s.asm))

    def triton(self, s):
        return "tl.dot" in s.calls
