from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class SharedMemory(Describer):
    """Shared memory: a `__shared__` buffer."""
    name = "shared_memory"
    version = 1
    phrase = {"en": "shared memory", "zh": "共享内存"}
    claim = r"shared[- ]memory|__shared__|共享内存"

    def cuda(self, s):
        return "__shared__" in s.tokens
