"""The `torch-aten` kind: CUDA kernels in the installed torch package's ATen headers."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError, Tree, torch_root


@KINDS.register
class TorchAten(SourceKind):
    """The installed torch package's ATen CUDA headers (offline; `include` defaults to ATen/native/cuda/*.cuh).

    Reached by its registry name `torch-aten`; `location` is ignored.
    """
    name = "torch-aten"
    version = 1

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        import torch

        root = torch_root() / "include"
        if not root.is_dir():
            raise SourceError(f"the installed torch has no include folder at {root}")
        prov = {"source_kind": self.name, "url": "https://github.com/pytorch/pytorch",
                "commit": getattr(torch.version, "git_version", None), "package": "torch",
                "version": torch.__version__}
        return Tree(root, prov, src.include or ["ATen/native/cuda/*.cuh"], src.exclude,
                    torch_headers=True)  # licence: the registry's; torch's metadata ANDs all it bundles
