"""Launch contracts and harness headers: every op names a real contract, every harness declares its own."""
from pathlib import Path

import pytest
import yaml

from sftbuild.binding import Binding
from sftbuild import ops
from sftbuild.ops import Op, launch
from sftbuild.bind.binders import manifest
from sftbuild.trial import harness as H

ALL = ops.all_ops()
REGISTRY = Path(H.__file__).parents[1] / "harvest" / "registry.yaml"


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_op_launch_names_a_real_contract(name):
    assert ALL[name].launch in launch.CONTRACTS, (name, ALL[name].launch)


def test_an_unknown_launch_is_an_error_at_registration():
    with pytest.raises(ValueError, match="'gemm' names no launch contract"):
        Op(name="x", family="matmul", semantics={}, reference=None, make_inputs=None, shape_pool=[], io={},
           launch="gemm")
    assert Op(name="x", family="matmul", semantics={}, reference=None, make_inputs=None, shape_pool=[],
              io={}).launch == "tensors"


def test_contracts_state_their_argument_order():
    assert {"tensors", "unary", "binary", "rowwise", "rowwise_backward"} <= set(launch.CONTRACTS)
    for name, fn in launch.CONTRACTS.items():
        assert "ptrs" in (fn.__doc__ or ""), name
    with pytest.raises(KeyError, match="unknown launch contract"):
        launch.get("nope")


def test_every_harness_template_declares_its_contract():
    templates = {p.name.removesuffix(".cu.j2") for p in H.TEMPLATES.glob("*.cu.j2") if not p.name.startswith("_")}
    assert set(H.harnesses()) == templates
    for h in H.harnesses().values():
        assert h.contract == H.OP_CONTRACT or h.contract in launch.CONTRACTS, h
        assert h.defaults["block"] == 256 and "ns" in h.defaults
    assert H.get("persistent_softmax").limits == {"max_cols": 1024}
    assert H.get("aten_batch_norm_cl").limits == {"dims": {2: 1}}
    with pytest.raises(KeyError, match="unknown harness"):
        H.get("nope")


def test_the_header_is_not_rendered():
    src = H.env().get_template("aten_scan.cu.j2").render(
        kernel="k", tparams=[], torch_types=False, params={}, dtypes=[("float32", "float")], mode="innermost",
        **H.get("aten_scan").defaults)
    assert src.startswith("// Launcher for the ATen scan kernels") and "contract: tensors" not in src


def test_the_harness_contract_wins_over_the_ops():
    assert H.contract_for("persistent_softmax", ops.get("softmax").launch) == "rowwise"
    assert H.contract_for("aten_elementwise", ops.get("relu").launch) == "unary"
    assert H.contract_for("aten_scan", ops.get("cumsum").launch) == "tensors"
    assert H.contract_for("generic_launch", ops.get("add").launch) == "binary"  # generic: the op's own
    assert H.contract_for("", ops.get("softmax").launch) == "rowwise"


def test_a_template_without_a_header_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "bare.cu.j2").write_text("// no header\n")
    monkeypatch.setattr(H, "TEMPLATES", tmp_path)
    H.harnesses.cache_clear()
    try:
        with pytest.raises(ValueError, match="bare.cu.j2 has no"):
            H.harnesses()
        (tmp_path / "bare.cu.j2").write_text("{#- harness\ncontract: gemm\n-#}\n")
        with pytest.raises(KeyError, match="unknown launch contract 'gemm'"):
            H.harnesses()
    finally:
        H.harnesses.cache_clear()


def _declared_bindings():
    rows = list(manifest.table())
    for src in yaml.safe_load(REGISTRY.read_text())["sources"]:
        rows += src.get("bindings") or []
    return rows


def test_every_declared_binding_names_a_known_op_and_harness():
    rows = _declared_bindings()
    assert len(rows) >= 25
    for row in rows:
        for check in H.checks(Binding.from_dict(row)):  # the primary op and every `also`
            op = ops.get(check["op"])
            assert H.contract_for(check["harness"], op.launch) in launch.CONTRACTS, (row["kernel"], op.name)
