from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class WarpShuffle(Describer):
    """Warp shuffles: `__shfl*_sync`, torch's `WARP_SHFL*`, or `shfl.sync` in PTX."""
    name = "warp_shuffle"
    version = 1
    phrase = {"en": "warp shuffles", "zh": "warp shuffle指令"}
    claim = r"warp shuffle|__shfl"

    def cuda(self, s):
        return s.has_prefix("__shfl", "WARP_SHFL") or "shfl.sync" in s.asm
