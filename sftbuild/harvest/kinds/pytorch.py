"""The `pytorch` kind: a PyTorch source checkout."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest.kinds import KINDS
from sftbuild.harvest.kinds.dir import Dir
from sftbuild.harvest.sources import Source


@KINDS.register
class PyTorch(Dir):
    """A PyTorch source checkout (aten/src/ATen/native/cuda/*.cu, *.cuh); any folder holding aten/src/ATen."""
    name = "pytorch"
    version = 1
    order = 70
    url = "https://github.com/pytorch/pytorch"
    default_include = ["aten/src/ATen/native/cuda/*.cu", "aten/src/ATen/native/cuda/*.cuh"]
    torch_headers = True

    def recognise(self, spec: str, path: Path) -> Source | None:
        return super().recognise(spec, path) if (path / "aten" / "src" / "ATen").is_dir() else None
