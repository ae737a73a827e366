"""Params an op's input generator sets per variant (M-RoPE's sections per head size) reach every
trial of that variant: the book makes all variants' inputs before the first trial, so params shared
by the variants held the last one's values and a correct kernel was compared at the wrong sections."""
import types

import torch

from sftbuild.ops import model_layers as ML
from sftbuild.trial_types import TrialTask


def _run(shapes):
    from sftbuild.trial import guards, pristine, pyrun, refbook
    from sftbuild.trial import checks as C

    counter = types.SimpleNamespace(count=0, names=set())

    def wrapper(q, k, cos, sin, mrope_section=(16, 24, 24)):
        counter.count += 1  # stands in for the candidate's own Triton launch
        return list(ML._mrope(q, k, cos, sin, mrope_section))
    task = TrialTask.of({"id": "t", "language": "triton", "code": "", "binding": {"op": "qwen2vl_mrope"},
                         "entry": {"wrapper": "wrapper"}, "dtypes": ["float32"], "shapes": 1})
    guards.set_strict()
    dev = torch.device("cpu")
    prob = pyrun.OpProblem(task, dev)
    prob.shapes = shapes
    book = refbook.Book(prob, 1, dev, pyrun.layout_of)
    prob.bind(types.SimpleNamespace(wrapper=wrapper))
    return pyrun.Run(prob, dev, counter, set(), C.selected(), book, pristine.Pristine()), prob


def test_each_variant_keeps_the_params_its_inputs_were_made_with():
    from sftbuild.trial import pyrun

    small, large = (1, 2, 1, 4, 8), (2, 4, 2, 17, 64)
    run, prob = _run([small, large])
    assert prob.params_for(small, "float32")["mrope_section"] == ML.mrope_sections(8) == [2, 1, 1]
    assert prob.params_for(large, "float32")["mrope_section"] == ML.mrope_sections(64)
    assert prob.params["mrope_section"] == [16, 24, 24]  # the op's own params are left as they were
    for vi, v in enumerate(prob.variants()):
        ok, stats = pyrun.trial(run, v, "float32", "contiguous", 0, vi=vi)
        assert ok, (v, stats)



def _sample_entry_trials(name, entry, seeds=3):
    """Every seed's trial of op_db op `name` at its first pool shape, `entry` called as torch's op is
    (a probed binding's [["sample", None]] mapping)."""
    from sftbuild import ops
    from sftbuild.trial import guards, pristine, pyrun, refbook
    from sftbuild.trial import checks as C

    calls = types.SimpleNamespace(count=0, names=set())

    def counted(*args, **kwargs):
        calls.count += 1  # stands in for the candidate's own Triton launch
        return entry(*args, **kwargs)
    task = TrialTask.of({"id": "t", "language": "triton", "code": "", "dtypes": ["float32"], "shapes": 1, "entry": {},
                         "binding": {"op": name, "call": {"entry": "entry", "kind": "function",
                                                          "args": [["sample", None]],
                                                          "outputs": [{"from": "return", "index": None}]}}})
    guards.set_strict()
    dev = torch.device("cpu")
    prob = pyrun.OpProblem(task, dev)
    prob.shapes = [tuple(ops.get(name).shape_pool[0])]
    book = refbook.Book(prob, seeds, dev, pyrun.layout_of)
    prob.bind(types.SimpleNamespace(entry=counted))
    run = pyrun.Run(prob, dev, calls, set(), C.selected(), book, pristine.Pristine())
    results = [pyrun.trial(run, prob.shapes[0], "float32", "contiguous", seed, vi=0) for seed in range(seeds)]
    assert calls.count >= 2 * seeds
    return results


def test_an_op_db_variant_keeps_its_first_draws_arguments_at_every_seed():
    """op_db's threshold sample draws its threshold and value at random: seed 0's reference, seed 1's
    and the fresh inputs' must all be computed with the arguments the candidate is called with (they
    were drawn per seed and stored per variant, so an exact F.threshold was `incorrect`)."""
    import torch.nn.functional as F

    for ok, stats in _sample_entry_trials("opdb.nn.functional.threshold",
                                          lambda x, threshold, value, inplace=False: F.threshold(x, threshold, value)):
        assert ok, stats


def test_an_output_sized_by_the_input_values_is_held_to_the_size_of_each_orders_reference():
    """masked_select's output has as many elements as the mask has True: the second order's new mask
    gives another size, which is right (an exact masked_select was `incorrect`: "output 0 has shape
    (54,), the reference's (57,)"); a result of the first order's size there is still wrong."""
    for ok, stats in _sample_entry_trials("opdb.masked_select", torch.masked_select):
        assert ok, stats
    first = []

    def stale(x, mask):  # the first call's result handed back for the new mask
        first.append(first[0] if first else torch.masked_select(x, mask))
        return first[-1].clone()
    ok, stats = _sample_entry_trials("opdb.masked_select", stale, seeds=1)[0]
    assert not ok and "shape" in stats.get("why", ""), stats
