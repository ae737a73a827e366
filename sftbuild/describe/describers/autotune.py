from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class Autotune(Describer):
    """Autotuned launch configurations: `@triton.autotune`."""
    name = "autotune"
    version = 1
    phrase = {"en": "autotuned launch configurations", "zh": "自动调优的启动配置"}
    claim = r"autotun|自动调优"

    def triton(self, s):
        return "triton.autotune" in s.calls
