"""Inductor records validate on a GPU: a program pair through the module path, a per-kernel record
run inside its program's host code, and a deliberately broken copy of each, dropped."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sftbuild.harvest import inductor
from sftbuild import inductor_code as IC
from sftbuild.harvest.inductor import Program
from sftbuild.harvest.kinds.torch_inductor import records
from sftbuild.validate import static

PROGRAM = (Path(__file__).parents[1] / "data" / "inductor" / "program_ln_gelu.py").read_text()


@pytest.fixture(scope="module")
def harvested():
    import torch
    import triton

    comp = inductor.prepare("program_ln_gelu", PROGRAM)
    assert comp.sizes == ["batch_size"], comp
    return records("torch-inductor", Program("program_ln_gelu", PROGRAM), comp,
                   {"torch": torch.__version__, "triton": triton.__version__})


def _task(rec):
    return {"id": rec.id, "language": rec.language, "code": rec.code, "binding": rec.binding, "entry": rec.entry,
            "dtypes": list(rec.binding.dtypes), "shapes": 3, "seeds": 2, "timing": False, "device": "cuda",
            "runtime_checks": None}


def _broken(kernel_code: str) -> str:
    """The kernel with every stored value scaled: it still compiles and runs, wrongly."""
    out, n = re.subn(r"tl\.store\(([^,]+), (\w+)", r"tl.store(\1, \2 * 1.5", kernel_code)
    assert n
    return out


def _run(rec_or_task):
    from sftbuild.trial import pyrun

    task = rec_or_task if isinstance(rec_or_task, dict) else _task(rec_or_task)
    assert static.scan(task["code"], task["language"]) == []
    return pyrun.run_python(task)


@pytest.mark.gpu
def test_program_pair_validates_and_its_broken_copy_is_dropped(harvested):
    pair = harvested[0]
    out = _run(pair)
    print("pair:", out["status"], out.get("reason"), out.get("detail"), out.get("triton_kernels"))
    assert out["status"] == "ok", out
    assert out["launches"] > 0 and set(out["triton_kernels"]) <= set(IC.kernel_names(pair.code))
    assert len({t["shape"]["sizes"]["batch_size"] for t in out["trials"]}) >= 2
    name = harvested[1].binding.kernel
    bad = IC.splice(pair.code, name, _broken(harvested[1].code))
    out = _run({**_task(pair), "code": bad})
    assert (out["status"], out["reason"]) == ("dropped", "incorrect"), out


@pytest.mark.gpu
def test_kernel_record_validates_in_its_program_and_its_broken_copy_is_dropped(harvested):
    kernel = harvested[-1]
    out = _run(kernel)
    print("kernel:", kernel.binding.kernel, out["status"], out.get("reason"), out.get("detail"))
    assert out["status"] == "ok", out
    assert kernel.binding.kernel in out["triton_kernels"]
    out = _run({**_task(kernel), "code": _broken(kernel.code)})
    assert (out["status"], out["reason"]) == ("dropped", "incorrect"), out
