from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class MaskedAccess(Describer):
    """Masked loads for the tails: `tl.load(..., mask=...)`."""
    name = "masked_access"
    version = 1
    phrase = {"en": "masked loads for the tails", "zh": "带掩码的尾部访存"}
    claim = r"masked loads|带掩码"

    def triton(self, s):
        return "mask" in s.tokens and "tl.load" in s.calls
