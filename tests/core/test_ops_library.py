"""The larger reference library: op_db-backed ops, composites against independent formulas,
package reference discovery on real wheels, and the shortlist ranking."""
import math
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from sftbuild import ops
from sftbuild.ops import compare, opdb

WHEELS = Path("/work/pkgs")
LIGER = WHEELS / "liger_kernel-0.8.5-py3-none-any.whl"
GEMS = WHEELS / "flag_gems-5.0.2-py3-none-any.whl"


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _run(name, shape=None, dtype="float64", seed=0, params=None):
    op = ops.get(name)
    shape = shape or min(op.shape_pool, key=math.prod)
    p = {**op.params, **(params or {})}
    inputs = op.make_inputs(shape, "float32", "contiguous", _gen(seed), p)
    inputs = ops.upcast(inputs) if dtype == "float64" else inputs
    return inputs, ops.as_outputs(op.run_reference(inputs, p)), p


# ---- op_db ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def opdb_ops():
    return opdb.load()


def test_opdb_loads_only_when_asked_and_without_scipy():
    """The registry never imports op_db; op_db loads without scipy (it would take scipy only for torch's
    own numerical references), and scipy imports as usual afterwards."""
    code = ("import sys; from sftbuild import ops; ops.all_ops(); ops.get('relu'); ops.shortlist('rms_norm', ['x']);"
            "print('common_methods_invocations' in ' '.join(sys.modules));"
            "from sftbuild.ops import opdb; n = len(opdb.op_db());"
            "print(n > 500, any(m.split('.')[0] == 'scipy' for m in sys.modules));"
            "import importlib.util; print(importlib.util.find_spec('scipy') is None or "
            "__import__('scipy.special').special.erf(0.0) == 0.0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False", "True"], out.stdout


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.13.0+cpu", "2.13.0"])
def test_a_shipped_release_is_read_not_scanned(version, tmp_path, monkeypatch):
    """A machine on a torch release the package ships a catalogue for (the H200's 2.11+cu130, this
    CI's 2.13) reads it: a scan of op_db takes a minute of CPU in the first process that needs it."""
    monkeypatch.setenv("SFTBUILD_CACHE", str(tmp_path))
    monkeypatch.setattr(opdb.torch, "__version__", version)
    monkeypatch.setattr(opdb, "scan", lambda infos: pytest.fail("scanned op_db"))
    cat = opdb.catalogue({})
    assert cat["format"] == opdb.FORMAT and cat["torch"].split("+")[0] == version.split("+")[0]
    assert len(cat["ops"]) > 400


def test_opdb_has_hundreds_of_ops_and_records_skips(opdb_ops):
    assert len(opdb_ops) >= 300, len(opdb_ops)
    assert all(n.startswith("opdb.") for n in opdb_ops)
    assert not set(opdb_ops) & set(ops.all_ops())  # no clash with hand-written names
    c = opdb.counts()
    assert c["registered"] == len(opdb_ops) and c["skipped"] == len(opdb.SKIPPED) > 50
    why = opdb.SKIPPED
    assert why["opdb.sum"].startswith("covered") and why["opdb.nn.functional.gelu"].startswith("covered")
    assert why["opdb.nn.functional.dropout"].startswith("random")
    assert why["opdb.linalg.svd"].startswith("linear-algebra")
    assert "opdb.masked.sum" in opdb_ops and "opdb.addcdiv" in opdb_ops  # variants and namespaces are not "covered"
    assert ops.get("opdb.addcdiv") is opdb_ops["opdb.addcdiv"]
    assert "opdb.addcdiv" in ops.all_ops(opdb=True) and "relu" in ops.all_ops(opdb=True)
    with pytest.raises(KeyError):
        ops.get("opdb.no_such_op")


def test_opdb_semantics_and_metadata(opdb_ops):
    op = opdb_ops["opdb.addcdiv"]
    assert "torch.addcdiv" in op.semantics["en"] and "division" in op.semantics["en"]
    assert "torch.addcdiv" in op.semantics["zh"] and "的计算" in op.semantics["zh"]
    for op in opdb_ops.values():
        assert op.semantics["en"] and op.semantics["zh"] and op.shape_pool and op.launch == "tensors", op.name
        assert set(op.dtypes) <= {"float32", "float16", "bfloat16"} and op.dtypes, op.name
        assert len(op.io["outputs"]) == op.outputs, op.name


SAMPLE = 40


def _sample(names):
    names = sorted(names)
    step = max(1, len(names) // SAMPLE)
    return names[::step][:SAMPLE]


def test_opdb_sample_runs_on_cpu(opdb_ops):
    """A deterministic sample of ~40 op_db ops: inputs from the seed, the float32 reference agrees with the
    float64 one, a fresh seed gives the same shapes, and an all-zero output does not pass every op."""
    zero_caught = 0
    for name in _sample(opdb_ops):
        op = opdb_ops[name]
        shape = op.shape_pool[0]
        params = dict(op.params)
        inputs = op.make_inputs(shape, "float32", "contiguous", _gen(0), params)
        assert inputs and all(isinstance(t, torch.Tensor) for t in inputs), name
        assert tuple(next(t for t in inputs).shape) == tuple(shape), name
        outs = ops.as_outputs(op.run_reference(inputs, params))
        ref64 = ops.as_outputs(op.run_reference(ops.upcast(inputs), params))
        assert len(outs) == len(ref64) == op.outputs, name
        for out, r64 in zip(outs, ref64):
            assert tuple(out.shape) == tuple(r64.shape), name
            ok, stats = compare(out, r64, "float32", op.tolerance, native=out)
            assert ok, (name, stats)
        again = op.make_inputs(shape, "float32", "contiguous", _gen(1), dict(op.params))
        assert [t.shape for t in again] == [t.shape for t in inputs], name
        zero_caught += any(not compare(torch.zeros_like(o), r, "float32", op.tolerance)[0]
                           for o, r in zip(outs, ref64))
    assert zero_caught >= SAMPLE * 0.8


def test_opdb_inputs_follow_the_seed(opdb_ops):
    op = opdb_ops["opdb.addcdiv"]
    a = op.make_inputs(op.shape_pool[0], "float16", "contiguous", _gen(3), {})
    b = op.make_inputs(op.shape_pool[0], "float16", "contiguous", _gen(3), {})
    c = op.make_inputs(op.shape_pool[0], "float16", "contiguous", _gen(4), {})
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and not torch.equal(a[0], c[0])
    assert a[0].dtype == torch.float16


def test_first_sentence():
    doc = "add(input, other, *, alpha=1, out=None) -> Tensor\n\nAdds :attr:`other`, scaled by :attr:`alpha`, " \
          "to :attr:`input`.\n\n.. math::\n  x"
    assert opdb.first_sentence(doc) == "adds other, scaled by alpha, to input"
    assert opdb.first_sentence(None) is None and opdb.first_sentence("f(x) -> Tensor") is None


# ---- composites against independent formulas --------------------------------------------------

def _close(a, b, tol=1e-9):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.allclose(a.double(), b.double(), rtol=tol, atol=tol), float((a.double() - b.double()).abs().max())


def test_gated_activations():
    (a, b), (y,), _ = _run("swiglu", (17, 100))
    _close(y, a / (1 + torch.exp(-a)) * b)
    (a, b), (y,), _ = _run("geglu", (17, 100))
    _close(y, 0.5 * a * (1 + torch.erf(a / math.sqrt(2))) * b)
    (a, b), (y,), _ = _run("geglu_tanh", (17, 100))
    _close(y, 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))) * b)
    assert not torch.allclose(ops.get("geglu").reference(a, b), y)  # erf and tanh GELU are different ops
    (x,), (y,), _ = _run("silu_and_mul", (17, 100))
    assert x.shape == (17, 200)
    _close(y, F.silu(x[:, :100]) * x[:, 100:])


def test_rope_half_and_interleaved():
    shape = (2, 4, 2, 17, 64)
    (q, k, cos, sin), (qo, ko), _ = _run("rope", shape)
    rot = lambda t: torch.cat([-t[..., 32:], t[..., :32]], -1)  # noqa: E731  (HF rotate_half)
    c, s = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    _close(qo, q * c + rot(q) * s)
    _close(ko, k * c + rot(k) * s)
    (q, k, cos, sin), (qo, ko), _ = _run("rope_interleaved", shape)
    z = torch.view_as_complex(q.reshape(*q.shape[:-1], 32, 2).contiguous()) * torch.complex(cos, sin)
    _close(qo, torch.view_as_real(z).flatten(-2))
    pos = torch.arange(17, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, 64, 2) / 64)
    _close(cos, pos.cos(), 1e-6)


def test_cross_entropy_family():
    (x, t), (loss,), p = _run("cross_entropy_mean", (64, 4099))
    assert (t == -100).any() and (t != -100).any()
    keep = t != -100
    lse = torch.logsumexp(x, -1)
    per = lse[keep] - x[keep].gather(1, t[keep, None])[:, 0]
    _close(loss, per.mean())
    _, (s,), _ = _run("cross_entropy_sum", (64, 4099))
    _close(s, per.sum())
    _, (none,), _ = _run("cross_entropy_ignore", (64, 4099))
    assert none.shape == (64,) and (none[~keep] == 0).all()
    _, (ls,), _ = _run("cross_entropy_label_smoothing", (64, 4099))
    smooth = (lse[keep] - x[keep].mean(-1))
    _close(ls, (0.9 * per + 0.1 * smooth).mean())
    (h, w, t), (fl,), _ = _run("fused_linear_cross_entropy", (17, 64, 1000))
    _close(fl, F.cross_entropy(h @ w.T, t, ignore_index=-100))


def test_kl_and_jsd():
    (x, y), (kl,), _ = _run("kl_div", (17, 1000))
    assert torch.allclose(x.exp().sum(-1), torch.ones(17, dtype=x.dtype), atol=1e-5)
    _close(kl, (y * (y.log() - x)).sum() / 17)
    (x, ly), (kl2,), _ = _run("kl_div_log_target", (17, 1000))
    _close(kl2, (ly.exp() * (ly - x)).sum() / 17)
    (x, y), (j,), _ = _run("jsd", (17, 1000))
    p, q = y.exp(), x.exp()
    m = 0.5 * (p + q)
    _close(j, (0.5 * (p * (p / m).log()).sum() + 0.5 * (q * (q / m).log()).sum()) / 17)
    op = ops.get("jsd")
    _close(op.reference(x, y, beta=0.0), (p * (y - x)).sum() / 17)  # beta 0: forward KL(P || Q)


def test_norms_softmax_logsumexp():
    (x, w), (y,), _ = _run("rms_norm_offset", (17, 100))
    _close(y, x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * (1 + w))
    (x, r, w), (y, h), _ = _run("add_rms_norm_residual", (17, 100))
    _close(h, x + r)
    _close(y, h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-6) * w)
    (x, w, b), (y,), _ = _run("layer_norm_offset", (17, 100))
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    _close(y, (x - mu) / torch.sqrt(var + 1e-5) * (1 + w) + b)
    (x, w, b), (y,), _ = _run("group_norm_4d", (2, 64, 7, 7))
    g = x.reshape(2, 32, -1)
    n = ((g - g.mean(-1, keepdim=True)) / torch.sqrt(g.var(-1, unbiased=False, keepdim=True) + 1e-5)).reshape(x.shape)
    _close(y, n * w[:, None, None] + b[:, None, None])
    (x,), (y,), _ = _run("softmax_temperature", (17, 100))
    e = torch.exp(x / 0.7 - (x / 0.7).amax(-1, keepdim=True))
    _close(y, e / e.sum(-1, keepdim=True))
    (x,), (y,), _ = _run("logsumexp", (17, 100))
    _close(y, x.exp().sum(-1).log())


def _sdpa_manual(q, k, v, mask):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def test_attention_masked_gqa_varlen():
    (q, k, v, mask), (o,), _ = _run("sdpa_masked", (2, 4, 2, 17, 32))
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    _close(o, F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask))
    (q, k, v), (o,), _ = _run("sdpa_gqa_causal", (2, 4, 2, 17, 32))
    _close(o, F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True))
    for name, causal in (("attention_varlen", False), ("attention_varlen_causal", True)):
        (q, k, v, cu), (o,), _ = _run(name, (3, 2, 2, 32))
        assert cu.dtype == torch.int32 and int(cu[-1]) == q.shape[0]
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            n = b - a
            m = torch.ones(n, n, dtype=torch.bool).tril() if causal else torch.ones(n, n, dtype=torch.bool)
            want = _sdpa_manual(q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), m)
            _close(o[a:b], want.transpose(0, 1))


# ---- model layers (dynamic tanh, poly norm, sparsemax, TVD, Llama 4 / Qwen2-VL RoPE, MTA) ---------

def test_dyt_and_poly_norm():
    (x, alpha, gamma, beta), (y,), _ = _run("dyt", (17, 100))
    assert alpha.shape == (1,) and gamma.shape == beta.shape == (100,)
    z = 2 * alpha * x
    _close(y, gamma * (torch.exp(z) - 1) / (torch.exp(z) + 1) + beta)  # tanh(a) = (e^2a - 1) / (e^2a + 1)
    (x, w, b), (y,), _ = _run("poly_norm", (17, 100))
    assert w.shape == (3,) and b.shape == ()
    want = torch.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        terms = [row ** p / math.sqrt(float((row ** (2 * p)).sum()) / row.numel() + 1e-6) for p in (3, 2, 1)]
        want[i] = w[0] * terms[0] + w[1] * terms[1] + w[2] * terms[2] + b
    _close(y, want)


def test_sparsemax_is_the_simplex_projection():
    (x,), (y,), _ = _run("sparsemax", (17, 100))
    assert (y >= 0).all() and (y == 0).any()
    _close(y.sum(-1), torch.ones(17, dtype=y.dtype))
    for i in range(x.shape[0]):  # tau by bisection on sum(max(x - tau, 0)) = 1
        lo, hi = float(x[i].min()) - 1, float(x[i].max())
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if float((x[i] - mid).clamp_min(0).sum()) > 1 else (lo, mid)
        _close(y[i], (x[i] - lo).clamp_min(0), 1e-8)
    op = ops.get("sparsemax")
    _close(op.reference(x.T, dim=0), y.T)  # along another dim


def test_tvd():
    (p, q, labels), (loss,), prm = _run("tvd", (64, 4099))
    assert prm["reduction"] == "batchmean" and (labels == -100).any() and (labels != -100).any()
    _close(p.sum(-1), torch.ones(64, dtype=p.dtype), 1e-5)  # float32 probabilities
    rows = [i for i in range(64) if int(labels[i]) != -100]
    _close(loss, sum(0.5 * (p[i] - q[i]).abs().sum() for i in rows) / len(rows))
    op = ops.get("tvd")
    _close(op.reference(p, q, labels, reduction="sum", has_label=False), 0.5 * (p - q).abs().sum())
    _close(op.reference(p, q, labels, reduction="mean"), loss / 4099)


def test_cross_entropy_tvd_per_row():
    (s, t, labels), (ce, tvd), prm = _run("cross_entropy_tvd", (17, 1000))
    assert prm["ignore_index"] == -100 and (labels == -100).any() and (labels != -100).any()
    assert ce.shape == tvd.shape == (17,)
    for i in range(17):
        if int(labels[i]) == -100:
            assert float(ce[i]) == 0.0 and float(tvd[i]) == 0.0
            continue
        p, q = s[i].exp() / s[i].exp().sum(), t[i].exp() / t[i].exp().sum()
        _close(ce[i], -torch.log(p[labels[i]]))
        _close(tvd[i], 0.5 * (p - q).abs().sum())
    op = ops.get("cross_entropy_tvd")
    assert op.grad_constants == (1,)  # the teacher takes no gradient
    half = op.make_inputs((3, 33), "float16", "contiguous", _gen(), dict(op.params))
    assert all(o.dtype == torch.float32 for o in op.run_reference(half))  # float32, as the fused kernel returns


def test_grpo_loss_is_the_clipped_policy_loss_with_a_kl_penalty():
    (logits, old, ref, ids, adv, mask), (loss,), prm = _run("grpo_loss", (3, 5, 33))
    assert logits.shape == (3, 6, 33) and old.shape == ref.shape == ids.shape == mask.shape == (3, 5)
    t, beta, lo, hi = prm["temperature"], prm["beta"], prm["eps_low"], prm["eps_high"]
    per_seq = []
    for b in range(3):
        total, count = 0.0, 0
        for i in range(5):
            if not int(mask[b, i]):
                continue
            z = logits[b, i] / t
            logp = z[ids[b, i]] - math.log(float(z.exp().sum()))
            ratio = math.exp(logp - float(old[b, i]))
            a = float(adv[b])
            clipped = min(max(ratio, 1 - lo), 1 + hi)
            d = float(ref[b, i]) - logp
            total += -min(ratio * a, clipped * a) + beta * (math.exp(d) - d - 1)
            count += 1
        per_seq.append(total / max(count, 1))
    _close(loss, sum(per_seq) / 3)
    ratios = (torch.log_softmax(logits[:, :5] / t, -1).gather(-1, ids[..., None])[..., 0] - old).exp()
    assert ((ratios < 1 - lo) | (ratios > 1 + hi)).any() and ((ratios > 1 - lo) & (ratios < 1 + hi)).any()
    assert ops.get("grpo_loss").grad_constants == (1, 2, 4)  # only the logits take a gradient


def test_neighborhood_attention_sees_a_dilated_window_cut_at_the_ends():
    (q, k, v), (o,), prm = _run("neighborhood_attention", (2, 3, 17, 32))
    assert prm == {"kernel_size": 7, "dilation": 1}
    op = ops.get("neighborhood_attention")
    for ks, dil in ((7, 1), (5, 2)):
        out = op.reference(q, k, v, kernel_size=ks, dilation=dil)
        for i in (0, 8, 16):
            keys = [j for j in range(17) if abs(j - i) <= (ks // 2) * dil and (j - i) % dil == 0]
            w = torch.softmax(q[..., i:i + 1, :] @ k[..., keys, :].transpose(-1, -2) / math.sqrt(32), -1)
            _close(out[..., i:i + 1, :], w @ v[..., keys, :])
    _close(o, op.reference(q, k, v, kernel_size=7, dilation=1))
    wide = op.reference(q, k, v, kernel_size=35)  # a window past both ends is plain attention
    _close(wide, torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(32), -1) @ v)


def test_group_norm_is_its_formula_even_for_groups_of_one_value():
    for name, shape in (("group_norm", (2, 8, 33)), ("group_norm_4d", (2, 64, 7, 7))):
        (x, w, b), (y,), prm = _run(name, shape)
        _close(y, F.group_norm(x, prm["groups"], w, b, prm["eps"]))
    (x, w, b), (y,), _ = _run("group_norm", (1, 2, 1))  # one value per group: torch's F.group_norm refuses it
    _close(y, b.reshape(1, 2, 1))


def test_llama4_rope_is_a_complex_product():
    (q, k, freqs), (qo, ko), _ = _run("llama4_rope", (2, 4, 2, 17, 64))
    assert q.shape == (2, 17, 4, 64) and k.shape == (2, 17, 2, 64) and freqs.shape == (17, 32, 2)
    f = torch.complex(freqs[..., 0], freqs[..., 1])[:, None, :]  # [S, 1, D / 2]
    for x, out in ((q, qo), (k, ko)):
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], 32, 2).contiguous()) * f
        _close(out, torch.view_as_real(z).flatten(-2))
    theta = torch.arange(17, dtype=torch.float64)[:, None] * 500000.0 ** (-torch.arange(0, 64, 2) / 64)
    _close(freqs[..., 0], theta.cos(), 1e-6)


def test_qwen2vl_mrope_sections():
    from sftbuild.ops.model_layers import mrope_sections

    assert mrope_sections(128) == [16, 24, 24] and sum(mrope_sections(64)) == 32
    (q, k, cos, sin), (qo, ko), prm = _run("qwen2vl_mrope", (2, 4, 2, 17, 64))
    sec = prm["mrope_section"]
    assert sec == mrope_sections(64) and cos.shape == (3, 2, 17, 64)
    _close(cos[..., :32], cos[..., 32:])  # the two halves repeat, as the model's embedding makes them
    for x, out in ((q, qo), (k, ko)):
        want = torch.empty_like(x)
        for i in range(32):  # frequency i: temporal, height or width angle by its section
            comp = 0 if i < sec[0] else 1 if i < sec[0] + sec[1] else 2
            c, s = cos[comp, :, None, :, i], sin[comp, :, None, :, i]  # [B, 1, S]
            a, b = x[..., i], x[..., i + 32]
            want[..., i], want[..., i + 32] = a * c - b * s, b * c + a * s
        _close(out, want)


def test_multi_token_attention_and_causal_zero_mask():
    (scores, w, b), (out,), _ = _run("multi_token_attention", (2, 4, 17, 4, 3))
    n = 17
    keep = torch.tril(torch.ones(n, n, dtype=torch.bool))
    e = torch.where(keep, scores, torch.full_like(scores, -1e9)).exp()
    probs = e / e.sum(-1, keepdim=True)
    m = n - 2
    conv = b[None, :, None, None] + sum(torch.einsum("bcij,oc->boij", probs[:, :, di:di + m, dj:dj + m], w[:, :, di, dj])
                                        for di in range(3) for dj in range(3))
    _close(out, conv * torch.tril(torch.ones(m, m, dtype=scores.dtype)))
    (x,), (y,), _ = _run("causal_mask_zero", (2, 3, 17, 17))
    _close(y, torch.tril(x))


def test_relu_squared_rope_hf_modulated_rms_norm():
    (x,), (y,), _ = _run("relu_squared", (1000,))
    _close(y, torch.where(x > 0, x * x, torch.zeros_like(x)))
    (q, k, cos, sin), (qo, ko), _ = _run("rope_hf", (2, 4, 2, 17, 64))
    assert cos.shape == (2, 17, 64)
    half = ops.get("rope").reference(q, k, cos[0, :, :32], sin[0, :, :32])  # the same rotation, half-width angles
    _close(qo, half[0])
    _close(ko, half[1])
    (x, w, scale, shift), (y,), prm = _run("modulated_rms_norm", (2, 17, 100))
    assert prm["offset"] == 0.0 and scale.shape == shift.shape == (2, 100)
    for b in range(2):
        for t in range(17):
            row = x[b, t]
            n = row / math.sqrt(float((row * row).mean()) + 1e-6) * w
            _close(y[b, t], n * (1 + scale[b]) + shift[b])


def test_selective_log_softmax():
    (logits, ids, mask), (logp,), _ = _run("selective_log_softmax", (2, 16, 100))
    assert logits.shape == (2, 17, 100) and ids.shape == mask.shape == (2, 16) and (mask == 0).any()
    for b in range(2):
        for t in range(16):
            z = logits[b, t] / 0.9
            want = z[ids[b, t]] - math.log(float(torch.exp(z).sum())) if mask[b, t] else 0.0
            assert abs(float(logp[b, t]) - float(want)) < 1e-9


def test_attn_res_mixes_blocks_over_depth():
    (v, wq, wn), (h,), _ = _run("attn_res", (3, 2, 5, 33))
    for b in range(2):
        for t in range(5):
            scores = [float((v[i, b, t] / v[i, b, t].pow(2).mean().add(1e-6).sqrt() * wn * wq).sum()) for i in range(3)]
            e = [math.exp(s - max(scores)) for s in scores]
            _close(h[b, t], sum(e[i] / sum(e) * v[i, b, t] for i in range(3)))


def test_loss_and_grad_primitives_give_the_loss_and_its_gradient():
    (x, y), (loss, dx), _ = _run("jsd_loss_and_grad", (3, 33))
    p, q = y.exp(), x.exp()
    log_m = torch.log(0.5 * p + 0.5 * q)
    _close(loss, (0.5 * p * (y - log_m) + 0.5 * q * (x - log_m)) / 3)
    _close(dx, 0.5 * q * (x - log_m) / 3)  # liger's closed form of the gradient
    (x, q), (loss, dx), _ = _run("kl_loss_and_grad", (3, 33))
    soft = torch.softmax(x / 0.7, -1)
    _close(loss, 0.5 * (q * (q.log() - torch.log_softmax(x / 0.7, -1))).sum(-1))
    _close(dx, -0.5 * (q - soft * q.sum(-1, keepdim=True)) / 0.7)


def test_moe_swiglu_sums_each_tokens_routed_experts():
    (x, gate_up, down, index, weight), (out,), _ = _run("moe_swiglu", (5, 16, 32, 4, 2))
    assert index.dtype == torch.int32 and all(len(set(row.tolist())) == 2 for row in index)  # distinct experts
    for t in range(5):
        want = torch.zeros(16, dtype=torch.float64)
        for k in range(2):
            h = gate_up[index[t, k]] @ x[t]
            want += weight[t, k] * (down[index[t, k]] @ (h[:32] / (1 + torch.exp(-h[:32])) * h[32:]))
        _close(out[t], want)


def test_mhc_mixes_the_residual_streams_in_float32():
    (x, h_pre), (out,), _ = _run("mhc_pre", (3, 4, 33))
    _close(out, sum(h_pre[:, s, None] * x[:, s] for s in range(4)))
    (x, f, h_post, h_res), (out,), _ = _run("mhc_post_res", (3, 4, 33))
    for o in range(4):
        _close(out[:, o], h_post[:, o, None] * f + sum(h_res[:, o, i, None] * x[:, i] for i in range(4)))
    half = ops.get("mhc_pre")
    ins = half.make_inputs((3, 4, 33), "float16", "contiguous", _gen(0), {})
    assert half.run_reference(ins, {}).dtype == torch.float32


def test_element_mul_scales_by_a_0d_tensor():
    (x, g), (y,), _ = _run("element_mul", (3, 33))
    assert g.dim() == 0
    _close(y, x * float(g))


# ---- package references ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    if not (LIGER.exists() and GEMS.exists()):
        pytest.skip("package wheels not downloaded")
    root = tmp_path_factory.mktemp("wheels")
    for whl in (LIGER, GEMS):
        with zipfile.ZipFile(whl) as z:
            z.extractall(root / whl.stem)
    return root


def test_package_references_in_real_wheels(wheels):
    before = set(sys.modules)
    gems = ops.find_package_references(wheels / GEMS.stem)
    liger = ops.find_package_references(wheels / LIGER.stem)
    assert not any(m.startswith(("flag_gems", "liger_kernel")) for m in set(sys.modules) - before)  # AST only
    names = {(r["module"], r["name"]) for r in gems}
    assert ("flag_gems.fused.mhc.mhc_pre", "mhc_pre_ref") in names
    assert len(gems) >= 15 and sum(r["name"] == "torch_matmul" for r in gems) >= 10  # one per vendor backend
    assert not any(r["name"] == "torch_rotary_embedding" for r in gems)  # nested in a function: not importable
    assert not any("dtype" in r["name"] for r in gems)  # torch_dtype_to_triton is a utility, not a reference
    ref = next(r for r in gems if r["name"] == "mhc_pre_ref")
    assert ref["path"].endswith("mhc_pre.py") and ref["params"] and ref["signature"].startswith("mhc_pre_ref(")
    assert ref["why"] == "*_ref" and ref["line"] > 0
    assert any(r["name"] == "_llama4_vision_rope_reference" and r["why"] == "*_reference" for r in liger)


def test_package_op_imports_only_when_run(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "naive.py").write_text("import torch\n\ndef rms(x, w, eps=1e-6):\n"
                                  "    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w\n\n"
                                  "def _helper(x):\n    return x\n")
    (pkg / "kern.py").write_text("def naive_swiglu(a, b):\n    import torch\n    return torch.nn.functional.silu(a) * b\n"
                                 "def swiglu(a, b):\n    return a\n")
    found = {(r["module"], r["name"], r["why"]) for r in ops.find_package_references(tmp_path)}
    assert found == {("mypkg.naive", "rms", "function in a reference module"), ("mypkg.kern", "naive_swiglu", "naive_*")}
    op = ops.package_op("mypkg.naive", "rms", like="rms_norm", root=tmp_path, name="pkg.test.rms")
    assert "mypkg" not in sys.modules and ops.get("pkg.test.rms") is op
    inputs, (y,), p = _run("pkg.test.rms", (17, 100))
    want = ops.get("rms_norm").run_reference(inputs, p)
    _close(y, want)
    assert "mypkg.naive" in sys.modules
    sw = ops.package_op("mypkg/kern.py", "naive_swiglu", like=["a: [rows, cols]", "b: [rows, cols]"], root=tmp_path,
                        register=False)
    a, b = sw.make_inputs(sw.shape_pool[1], "float32", "contiguous", _gen(), {})
    assert a.shape == b.shape
    _close(sw.reference(a, b), F.silu(a) * b)


# ---- shortlist --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,params,want", [
    ("rms_norm_forward", ["x", "w", "eps"], "rms_norm"),
    ("_rms_norm_kernel", ["Y", "X", "W", "stride", "n_cols", "eps", "BLOCK_SIZE"], "rms_norm"),
    ("swiglu", ["a", "b"], "swiglu"),
    ("_geglu_tanh", ["a", "b"], "geglu_tanh"),
    ("fused_linear_cross_entropy", ["x", "w", "target"], "fused_linear_cross_entropy"),
    ("LigerRMSNormFunction", ["x", "w"], "rms_norm"),
    ("apply_rotary_pos_emb", ["q", "k", "cos", "sin"], "rope"),
    ("silu_and_mul_kernel", ["out", "x"], "silu_and_mul"),
    ("jsd_fwd", ["x", "y", "beta"], "jsd"),
    ("_dyt_fwd_kernel liger_dyt_fwd", ["x", "alpha", "gamma", "beta"], "dyt"),
    ("_sparsemax_forward_kernel _sparsemax_forward", ["x", "dim"], "sparsemax"),
    ("_tv_distance_kernel tv_distance_forward_triton", ["p", "q", "shift_labels", "reduction", "ignore_index",
                                                        "has_label"], "tvd"),
    ("poly_norm_forward", ["X", "W", "B", "eps"], "poly_norm"),
    ("llama4_rope_forward", ["q", "k", "freqs_cis", "BLOCK_SIZE", "imag_sign"], "llama4_rope"),
    ("qwen2vl_mrope_forward", ["q", "k", "cos", "sin", "mrope_section"], "qwen2vl_mrope"),
    ("LigerMultiTokenAttentionFunction", ["scores", "weight", "bias", "stride", "padding"], "multi_token_attention"),
    ("_mask_fwd_kernel _mask_zero_forward", ["scores"], "causal_mask_zero"),
    ("_relu_squared_forward_kernel relu_squared_forward", ["X"], "relu_squared"),
    ("modulated_rms_norm_forward", ["X", "W", "scale", "shift", "eps", "offset", "casting_mode"], "modulated_rms_norm"),
    ("fused_selective_log_softmax", ["logits", "input_ids", "temperature", "mask"], "selective_log_softmax"),
    ("_attn_res_fwd_kernel attn_res_forward", ["blocks", "w_query", "w_norm", "eps"], "attn_res"),
    ("_grpo_loss_fwd_kernel GrpoLossFunction", ["logits", "old_logp", "ref_logp", "completion_ids", "advantages",
                                                "completion_mask", "temperature", "beta"], "grpo_loss"),
    ("_neighborhood_mask_kernel fused_neighborhood_attention_forward", ["query", "key", "value", "kernel_size",
                                                                      "dilation", "scale"], "neighborhood_attention"),
    ("_fused_ce_tvd_forward_kernel fused_ce_tvd_forward", ["student_logits", "teacher_logits", "target",
                                                           "ignore_index"], "cross_entropy_tvd"),
])
def test_shortlist_ranks_the_right_op_first(name, params, want):
    got = ops.shortlist(name, params)
    assert got[0] == want, got
    assert got == ops.shortlist(name, params) and len(got) <= 8


def test_shortlist_keeps_variants_close():
    assert {"geglu", "gelu_tanh"} <= set(ops.shortlist("_geglu_tanh", ["a", "b"]))
    assert "silu_and_mul" in ops.shortlist("swiglu", ["a", "b"], k=4)
    assert ops.shortlist("qqq_zzz", ["x"]) == []
    assert len(ops.shortlist("softmax", [], k=3)) == 3


# ---- describe renders the new ops --------------------------------------------------------------

def test_describe_renders_new_ops(opdb_ops):
    from sftbuild.describe import stage as S
    from sftbuild.describe.describers import DESCRIBERS
    from sftbuild.record import Record

    conf = {"seed": 0, "languages": ["en", "zh"], "levels": ["brief", "detailed"], "arch": "sm_90",
            "smem_budget": 232448}
    code = "__global__ void k(float* y, const float* x, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }"
    composites = sorted(n for n, op in ops.all_ops().items()
                        if op.reference.__module__ in ("sftbuild.ops.composites", "sftbuild.ops.model_layers"))
    assert len(composites) >= 40
    claims = re.compile("|".join(d.claim for d in DESCRIBERS if d.claim), re.I)
    for name in sorted(opdb_ops):  # no op_db doc sentence reads as a technique claim
        assert not claims.search(re.sub(r"`[^`]*`", " ", opdb_ops[name].semantics["en"])), name
    for name in composites + _sample(opdb_ops)[:15]:
        rec = Record(language="cuda", code=code, source="test", entry={"kernels": ["k"], "params": ["float* y"]},
                     binding={"op": name})
        status, reason, payload = S.describe(rec, conf)
        assert status == "ok", (name, payload.get("problems"))
        op = ops.get(name)
        text = payload["instructions"]
        assert op.semantics["en"] in text["en:brief"] and op.semantics["zh"] in text["zh:brief"], name


def test_ops_command(opdb_ops):
    from click.testing import CliRunner

    from sftbuild.cli import main

    r = CliRunner().invoke(main, ["ops"], catch_exceptions=False)
    assert r.exit_code == 0 and "hand-written ops:" in r.output and "not loaded" in r.output
    r = CliRunner().invoke(main, ["ops", "--opdb"], catch_exceptions=False)
    assert r.exit_code == 0 and f"op_db ops (opdb.*): {len(opdb_ops)} registered" in r.output
    assert "random or uninitialised output" in r.output
    r = CliRunner().invoke(main, ["ops", "geglu_tanh"], catch_exceptions=False)
    assert r.exit_code == 0 and "tanh-approximation" in r.output and "zh:" in r.output
    r = CliRunner().invoke(main, ["ops", "no_such_op"])
    assert r.exit_code != 0 and "unknown op 'no_such_op'" in r.output and "Traceback" not in r.output


def test_shortlist_ranks_package_references_too():
    extra = {"mypkg.naive.rms_norm_ref": ["x", "weight", "eps"], "mypkg.naive.softmax_ref": ["x"]}
    got = ops.shortlist("_rms_norm_fwd_kernel", ["Y", "X", "W", "eps"], extra=extra)
    assert "mypkg.naive.rms_norm_ref" in got[:3] and "mypkg.naive.softmax_ref" not in got


def test_backward_composites():
    (dy, a, b), (da, db), _ = _run("swiglu_backward", (17, 100))
    sig = 1 / (1 + torch.exp(-a))
    _close(da, dy * b * sig * (1 + a * (1 - sig)))
    _close(db, dy * a * sig)
    (dy, a, b), (da, db), _ = _run("geglu_backward", (17, 100))
    cdf, pdf = 0.5 * (1 + torch.erf(a / math.sqrt(2))), torch.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    _close(da, dy * b * (cdf + a * pdf))
    _close(db, dy * a * cdf)
    (dy, a, b), (da_t, _), _ = _run("geglu_tanh_backward", (17, 100))
    assert not torch.allclose(da_t, ops.get("geglu_backward").reference(dy, a, b)[0])
    shape = (2, 4, 2, 17, 64)
    (gq, gk, cos, sin), (dq, dk), _ = _run("rope_backward", shape)
    # <rope(x), g> == <x, rope_backward(g)> for any x: the backward is the adjoint
    x = torch.randn(gq.shape, dtype=torch.float64)
    fwd = ops.get("rope").reference(x, gk, cos, sin)[0]
    _close((fwd * gq).sum(), (x * dq).sum())
    (gq, gk, cos, sin), (dq, _), _ = _run("rope_interleaved_backward", shape)
    fwd = ops.get("rope_interleaved").reference(x, gk, cos, sin)[0]
    _close((fwd * gq).sum(), (x * dq).sum())


def test_opdb_rebuild_gives_the_torch_call(opdb_ops):
    op = opdb_ops["opdb.addcdiv"]
    params = {}
    inputs = op.make_inputs(op.shape_pool[0], "float32", "contiguous", _gen(), params)
    args, kwargs = opdb.rebuild(inputs, params["call"])
    assert args[0] is inputs[0]
    _close(torch.addcdiv(*args, **kwargs), op.run_reference(inputs, params))


def test_an_opdb_op_with_few_sample_shapes_is_offered_them_scaled_with_its_call_kept():
    """mm's samples have one shape, (5, 10) x (10, 5): a probe needs three, so the pool adds the sample
    with every size above 1 doubled and tripled; sizes that must agree still agree."""
    import torch

    from sftbuild.ops import opdb

    mm = ops.get("opdb.mm")
    assert mm.shape_pool[:1] == [(5, 10)] and {(10, 20), (15, 30)} <= set(mm.shape_pool)
    params = dict(mm.params)
    a, b = mm.make_inputs((15, 30), "float32", "contiguous", torch.Generator().manual_seed(0), params)
    assert a.shape == (15, 30) and b.shape == (30, 15)
    torch.testing.assert_close(mm.run_reference([a, b], params), a @ b)
    assert opdb.scaled_shapes([(2, 1, 3)]) == {(4, 1, 6): ((2, 1, 3), 2), (6, 1, 9): ((2, 1, 3), 3)}
    assert opdb.scaled_shapes([(5,), (7,), (9,)]) == {}  # three shapes of its own are enough


def test_references_in_a_reference_folder_and_named_for_torch(tmp_path):
    ref = tmp_path / "vpkg" / "reference" / "norm"
    ref.mkdir(parents=True)
    for d in (tmp_path / "vpkg", tmp_path / "vpkg" / "reference", ref):
        (d / "__init__.py").write_text("")
    (ref / "rms.py").write_text("import torch\n\ndef rms(x):\n    return x\n\n"
                                "def _rms_pytorch_impl(x):\n    return x\n\ndef _to_torch(x):\n    return x\n")
    (tmp_path / "vpkg" / "pool.py").write_text("def bev_pool_torch(x):\n    return x\n")
    found = {(r["module"], r["name"], r["why"]) for r in ops.find_package_references(tmp_path)}
    assert found == {("vpkg.reference.norm.rms", "rms", "function in a reference module"),
                     ("vpkg.reference.norm.rms", "_rms_pytorch_impl", "*_torch, *_pytorch_*"),
                     ("vpkg.pool", "bev_pool_torch", "*_torch, *_pytorch_*")}


def test_a_reference_in_a_folder_without_init_still_may_not_use_its_package(tmp_path):
    from sftbuild.ops.package_refs import plain_torch

    ref = tmp_path / "vpkg" / "reference" / "vision"
    ref.mkdir(parents=True)
    (tmp_path / "vpkg" / "__init__.py").write_text("")
    (tmp_path / "vpkg" / "ops.py").write_text("import triton\n\n@triton.jit\ndef nms(x):\n    pass\n")
    (tmp_path / "vpkg" / "envs.py").write_text("import os\n\nFAST = os.environ.get('FAST')\n")
    (ref / "nms.py").write_text("from vpkg import envs, ops\n\ndef nms(x):\n    return ops.nms(x)\n\n"
                                "def nms_ref(x):\n    return x if envs.FAST else x.clone()\n")
    assert plain_torch(ref / "nms.py", "nms") is None  # no __init__.py: vpkg is not seen as its package
    assert "vpkg.ops" in plain_torch(ref / "nms.py", "nms", "vpkg")
    assert plain_torch(ref / "nms.py", "nms_ref", "vpkg") is None  # a settings module without Triton


def test_a_references_own_code_shapes_its_inputs():
    import ast

    from sftbuild.bind.binders.probed import by_name_inputs
    from sftbuild.ops.package_refs import package_op, read_shapes

    fn = ast.parse("def naive_gla(q, k, v, g):\n    q = q.float()\n    B, H, T, K, V = *q.shape, v.shape[-1]\n"
                   "    _, n = g.shape\n").body[0]
    shapes = read_shapes(fn, ["q", "k", "v", "g"])
    assert shapes["q"] == ["b", "h", "t", "k"] and shapes["v"] == ["...", "v"] and shapes["g"][1] == "n"
    io = by_name_inputs(["q", "k", "v"], shapes)
    assert io == ["q: [b, h, t, k]", "k: [b, h, t, k]", "v: [b, h, t, v]"]
    assert by_name_inputs(["x", "weight", "scale"], {}) == ["x: [rows, cols]", "weight: [cols]", "scale: [1]"]
    op = package_op("m", "naive_gla", like=io, register=False)
    q, k, v = op.make_inputs(op.shape_pool[2], "float32", "contiguous", _gen(), {})
    assert q.shape == k.shape and v.shape[:3] == q.shape[:3] and q.numel() < 1 << 16  # small axes where there are many
