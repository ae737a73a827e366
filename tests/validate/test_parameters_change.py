"""Parameters that change (sftbuild.trial.parameters): a module pair's candidate gets the reference's
new parameter values (load_state_dict before its first call, an in-place step after it) and must follow."""
from __future__ import annotations

import torch

from sftbuild.binding import Binding
from sftbuild.trial import parameters, pyrun
from sftbuild.validate import pipeline
from tests.redteam.cases import REF_LINEAR

LINEAR = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self._key, self._wt = None, None

    def forward(self, x):
        return F.linear(x, self.fc.weight, self.fc.bias)
'''
REFRESHED = LINEAR.replace("        return F.linear(x, self.fc.weight, self.fc.bias)", '''        w = self.fc.weight
        if self._key != (w._version, w.data_ptr()):
            self._key, self._wt = (w._version, w.data_ptr()), w.detach().clone()
        return F.linear(x, self._wt, self.fc.bias)''')
AT_INIT = LINEAR.replace("        self._key, self._wt = None, None",
                         "        self.register_buffer('w0', self.fc.weight.detach().clone())").replace(
    "F.linear(x, self.fc.weight, self.fc.bias)", "F.linear(x, self.w0, self.fc.bias)")
FIRST_CALL = LINEAR.replace("        return F.linear(x, self.fc.weight, self.fc.bias)", '''        if self._wt is None:
            self._wt = (self.fc.weight.detach().clone(), self.fc.bias.detach().clone())
        return F.linear(x, *self._wt)''')


def _pair(code):
    binding = {"kind": "kernelbench", "how": "exact", "reference": REF_LINEAR}
    task = {"id": "t", "language": "kernelbench", "code": code, "binding": binding, "entry": {},
            "dtypes": pipeline.task_dtypes(Binding.from_dict(binding)), "shapes": 1, "seeds": 1, "timing": False, "device": "cpu"}
    return pyrun.run_python(task)


def test_a_layer_refreshing_its_derived_copy_passes_and_stale_copies_are_named():
    assert _pair(LINEAR)["status"] == "ok" and _pair(REFRESHED)["status"] == "ok"
    init, first = _pair(AT_INIT), _pair(FIRST_CALL)
    assert init["reason"] == "incorrect" and "after load_state_dict" in init["detail"]
    assert first["reason"] == "incorrect" and "optimiser step" in first["detail"]
    assert "stale copy of its parameters" in first["detail"]


def test_states_match_by_name_else_by_shape_in_order():
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    state, deltas = parameters.draw(ref)
    assert set(state) == {"0.weight", "0.bias", "1.weight", "1.bias"} and set(deltas) == set(state)
    renamed = torch.nn.ModuleDict({"fc": torch.nn.Linear(4, 3), "norm": torch.nn.LayerNorm(3)})
    assert parameters.match(state, renamed) == {"0.weight": "fc.weight", "0.bias": "fc.bias",
                                                "1.weight": "norm.weight", "1.bias": "norm.bias"}
    assert parameters.match(state, torch.nn.Linear(5, 3)) is None
    parameters.change(renamed, "load", state, parameters.match(state, renamed))
    assert torch.equal(renamed.norm.bias.double(), state["1.bias"].float().double())
