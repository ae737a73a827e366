from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class AsyncCopy(Describer):
    """Asynchronous global-to-shared copies: `memcpy_async`, `__pipeline_memcpy_async`, `cp.async` in PTX."""
    name = "async_copy"
    version = 1
    phrase = {"en": "asynchronous global-to-shared copies", "zh": "异步拷贝"}
    claim = r"asynchronous .*cop|cp\.async|异步拷贝"

    def cuda(self, s):
        return s.has("memcpy_async", "__pipeline_memcpy_async", "cp_async") or "cp.async" in s.asm
