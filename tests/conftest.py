import shutil

import pytest
import torch

from sftbuild.config import Config
from sftbuild.context import Context
from sftbuild.executor import LocalExecutor
from sftbuild.store import Store

HAS_GPU = torch.cuda.is_available()
HAS_NVCC = shutil.which("nvcc") is not None or __import__("os").path.exists("/usr/local/cuda/bin/nvcc")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)


@pytest.fixture
def ctx(tmp_path):
    store = Store(tmp_path / "ws")
    ex = LocalExecutor(cpu_workers=1, gpus="auto", progress=False)
    c = Context(store=store, config=Config(), executor=ex, echo=lambda s: None, progress=False)
    yield c
    ex.close()
    store.close()
