"""Skip a package's backend folders written for accelerators other than NVIDIA GPUs.

Packages that ship kernels for several chips keep each vendor's variant in a folder of its own under
a `backend(s)/`, `device(s)/` or `platform(s)/` folder (`liger_kernel/ops/backends/_ascend/`,
`flag_gems/runtime/backend/_kunlunxin/`). Those files target an Ascend NPU, a Kunlunxin XPU, a
Cambricon MLU, ...: they import that chip's runtime or tune for its memory, and are not samples of
GPU kernels for this dataset (a copy that happens to run on CUDA is a near-duplicate of the main
one). So is a folder or module named `triton_<vendor>` anywhere (`fla/modules/activations/triton_ascend.py`,
`backends/triton_ascend/`). A folder named for NVIDIA, CUDA, Triton or the package's generic code is kept. `names` adds
vendor folder names; `harvest.file_filters: {other_accelerator: false}` keeps every file.
"""
from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

from sftbuild.config import opt
from sftbuild.harvest.filters import FILE_FILTERS, FileFilter

PARENTS = {"backend", "backends", "device", "devices", "platform", "platforms"}
NAMES = {"ascend", "npu", "cann", "kunlunxin", "xpu", "cambricon", "mlu", "mthreads", "musa", "enflame", "gcu",
         "tsingmicro", "sunrise", "aipu", "metax", "maca", "hygon", "dcu", "iluvatar", "corex", "arm", "cpu",
         "tpu", "habana", "hpu", "gaudi"}


@FILE_FILTERS.register
class OtherAccelerator(FileFilter):
    """Files under backends/_ascend/, backend/_kunlunxin/, ... are written for another accelerator."""
    name = "other_accelerator"
    version = 2  # `triton_<vendor>` folders and modules anywhere, and under backends/
    order = 12

    @dataclasses.dataclass
    class Params:
        names: list[str] = opt([], "vendor folder names (under backend/, devices/, ...) skipped besides "
                               "ascend, kunlunxin, cambricon, mthreads, ...")

    def __init__(self, params=None, **kw):
        super().__init__(params, **kw)
        self.names = NAMES | {n.lower().lstrip("_") for n in self.params.names}

    def check_path(self, rel, size):
        path = PurePosixPath(rel)
        parts = path.parts[:-1]
        for parent, part in zip(parts, parts[1:]):
            words = set(part.lower().strip("_").split("_"))
            if parent.lower() in PARENTS and (part.lower().lstrip("_") in self.names or words - {"triton"} <= self.names
                                              and words & self.names):
                return f"under {parent}/{part}/, written for another accelerator"
        for part in [*parts, path.stem]:  # `triton_ascend/` or `triton_ascend.py` anywhere: Triton for that chip
            words = set(part.lower().strip("_").split("_"))
            if "triton" in words and len(words) == 2 and words & self.names:
                return f"{part} is written for another accelerator"
        return None
