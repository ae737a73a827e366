from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class Atomics(Describer):
    """Atomic operations: `atomic*` (and torch's `gpuAtomic*`), `atom.` / `red.` in PTX, `tl.atomic_*`."""
    name = "atomics"
    version = 1
    phrase = {"en": "atomic operations", "zh": "原子操作"}
    claim = r"atomic|原子操作"

    def cuda(self, s):
        return s.has_prefix("atomic", "gpuAtomic", "fastAtomic") or "atom." in s.asm or "red." in s.asm

    def triton(self, s):
        return any(c.startswith("tl.atomic_") for c in s.calls)
