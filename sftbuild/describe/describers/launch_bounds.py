from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class LaunchBounds(Describer):
    """Launch bounds: `__launch_bounds__` or torch's `C10_LAUNCH_BOUNDS*`."""
    name = "launch_bounds"
    version = 1
    phrase = {"en": "launch bounds", "zh": "launch bounds限定"}
    claim = r"launch bounds"

    def cuda(self, s):
        return s.has("__launch_bounds__") or s.has_prefix("C10_LAUNCH_BOUNDS")
