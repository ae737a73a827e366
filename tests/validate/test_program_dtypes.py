"""Programs run at the dtypes their get_inputs() makes (validate.dtypes: declared), or at every float
dtype their reference runs at (all); the output contract holds at each."""
from __future__ import annotations

from sftbuild.binding import Binding
from sftbuild.trial_types import TrialTask
from sftbuild.ops.programs import declared_dtypes
from sftbuild.validate import pipeline
from sftbuild.trial import pyrun
from tests.redteam.cases import REF_LINEAR, REF_RELU

REF_HALF = REF_RELU.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dim, dtype=torch.float16)")
REF_LINEAR_BF16 = REF_LINEAR.replace("torch.randn(batch_size, in_features)",
                                     "torch.randn(batch_size, in_features, dtype=torch.bfloat16)")
RELU = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
       "        return torch.relu(x)\n"


def _pair(code, reference, mode="declared"):
    binding = {"kind": "kernelbench", "how": "exact", "reference": reference}
    task = {"id": "t", "language": "kernelbench", "code": code, "binding": binding, "entry": {},
            "dtypes": pipeline.task_dtypes(Binding.from_dict(binding), mode), "program_dtypes": mode, "shapes": 1, "seeds": 1,
            "timing": False, "device": "cpu"}
    return pyrun.run_python(task)


def test_a_programs_dtypes_are_read_from_its_get_inputs_source():
    assert declared_dtypes(REF_HALF) == ["float16"] and declared_dtypes(REF_RELU) == ["float32"]
    named = "import torch\nDT = torch.bfloat16\n\n\ndef get_inputs():\n    return [torch.randn(4).to(DT)]\n"
    assert declared_dtypes(named) == ["bfloat16"]
    assert declared_dtypes("def get_inputs(:\n") == ["float32"]  # unparsable: torch's default
    every = TrialTask("t", "kernelbench", "", program_dtypes="all")
    pair = Binding.from_dict({"kind": "kernelbench", "reference": REF_HALF})
    assert pyrun.program_dtypes(pair, every) == (["float16"], ["float32", "bfloat16"])
    # an Inductor kernel is compiled for its program's dtype alone
    kernel = Binding.from_dict({"kind": "inductor", "dtypes": ["float16"]})
    assert pyrun.program_dtypes(kernel, every) == (["float16"], [])


def test_a_half_program_runs_in_half_and_an_fp32_result_breaks_its_contract():
    out = _pair(RELU, REF_HALF)
    assert out["status"] == "ok" and {r["dtype"] for r in out["trials"]} == {"float16"}
    wide = _pair(RELU.replace("torch.relu(x)", "torch.relu(x).float()"), REF_HALF)
    assert wide["reason"] == "incorrect" and "float32, the reference's is float16" in wide["detail"]


def test_a_bf16_program_with_float32_parameters_runs_with_both_models_cast_to_bf16():
    # nn.Linear is built in float32 and get_inputs() makes bf16 (a mix torch refuses, on the CPU too):
    # both models follow the inputs' dtype, as KernelBench's harness casts them
    fc = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n" \
         "    def __init__(self, i, o):\n        super().__init__()\n        self.fc = nn.Linear(i, o)\n\n" \
         "    def forward(self, x):\n        return self.fc(x)\n"
    out = _pair(fc, REF_LINEAR_BF16)
    assert out["status"] == "ok", out
    assert {r["dtype"] for r in out["trials"]} == {"bfloat16"}
    wide = _pair(fc.replace("self.fc(x)", "self.fc(x).float()"), REF_LINEAR_BF16)
    assert wide["reason"] == "incorrect" and "float32, the reference's is bfloat16" in wide["detail"]


def test_all_adds_the_float_dtypes_the_reference_runs_at():
    out = _pair(RELU, REF_RELU, "all")
    assert out["status"] == "ok" and {r["dtype"] for r in out["trials"]} == {"float32", "float16", "bfloat16"}


def test_the_instruction_states_the_programs_own_dtype():
    from sftbuild.describe import features
    from sftbuild.describe.stage import _facts
    from sftbuild.record import Record

    rec = Record(source="t", language="kernelbench", code=RELU, entry={"backend": "triton", "kernels": ["ModelNew"]},
                 binding={"kind": "kernelbench", "how": "exact", "reference": REF_HALF})
    feats = features.extract(rec)
    assert feats["dtypes"] == ["float16"]
    assert _facts(rec, feats, {"seed": 0, "arch": "sm_90", "smem_budget": 1})["dtypes"] == ["float16"]
