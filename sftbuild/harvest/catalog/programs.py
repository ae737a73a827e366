"""The built-in catalog of reference programs for the Inductor source.

Each entry is (name, init body, forward body, inputs, init inputs); `catalog()`
renders it as a KernelBench-format module, which is both what is compiled and
the `reference` the generated kernels are bound to. Shapes are moderate so the
whole catalog compiles in minutes; compilation uses dynamic shapes anyway.
"""
from __future__ import annotations

N, D = 4096, 1024  # rows, features
X = f"torch.randn({N}, {D})"
V = f"torch.randn({D})"
VSQ = f"torch.rand({N}, {D})"  # a second moment (Adam's v) is never negative: its sqrt stays finite

# name, __init__ body, forward(self, ...) signature + body, get_inputs list, get_init_inputs list
PROGRAMS: list[tuple[str, str, str, str, str]] = [
    # fused elementwise chains
    ("add_relu", "", "x, y):\n        return torch.relu(x + y)", f"[{X}, {X}]", "[]"),
    ("mul_add", "", "x, y, z):\n        return x * y + z", f"[{X}, {X}, {X}]", "[]"),
    ("gelu_tanh", "", "x):\n        return F.gelu(x, approximate='tanh')", f"[{X}]", "[]"),
    ("gelu_erf", "", "x):\n        return F.gelu(x)", f"[{X}]", "[]"),
    ("silu_mul", "", "x, y):\n        return F.silu(x) * y", f"[{X}, {X}]", "[]"),
    ("swiglu_split", "", "x):\n        a, b = x.chunk(2, dim=-1)\n        return F.silu(a) * b", f"[{X}]", "[]"),
    ("bias_gelu", "", "x, b):\n        return F.gelu(x + b)", f"[{X}, {V}]", "[]"),
    ("bias_dropout_add_eval", "", "x, b, r):\n        return r + (x + b)", f"[{X}, {V}, {X}]", "[]"),
    ("sigmoid_mul", "", "x):\n        return x * torch.sigmoid(x)", f"[{X}]", "[]"),
    ("hardswish", "", "x):\n        return x * torch.clamp(x + 3, 0, 6) / 6", f"[{X}]", "[]"),
    ("leaky_relu_scale", "", "x):\n        return F.leaky_relu(x, 0.1) * 2.0", f"[{X}]", "[]"),
    ("elu_plus_one", "", "x):\n        return F.elu(x) + 1.0", f"[{X}]", "[]"),
    ("softplus", "", "x):\n        return F.softplus(x)", f"[{X}]", "[]"),
    ("mish", "", "x):\n        return x * torch.tanh(F.softplus(x))", f"[{X}]", "[]"),
    ("exp_log_chain", "", "x):\n        return torch.log1p(torch.exp(-x.abs())) + x.clamp(min=0)", f"[{X}]", "[]"),
    ("where_mask", "", "x, y):\n        return torch.where(x > 0, x, y * 0.5)", f"[{X}, {X}]", "[]"),
    ("clamp_round", "", "x):\n        return torch.round(torch.clamp(x * 10, -127, 127))", f"[{X}]", "[]"),
    ("rope_rotate", "", "x, cos, sin):\n        x1, x2 = x.chunk(2, dim=-1)\n"
     "        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)",
     f"[{X}, torch.randn({N}, {D // 2}), torch.randn({N}, {D // 2})]", "[]"),
    ("quantize_int8", "", "x):\n        s = x.abs().amax(dim=-1, keepdim=True) / 127\n"
     "        return torch.round(x / s).clamp(-127, 127).to(torch.int8), s", f"[{X}]", "[]"),
    ("polynomial", "", "x):\n        return 1 + x + x * x / 2 + x * x * x / 6", f"[{X}]", "[]"),
    # norms
    ("layer_norm", f"self.ln = nn.LayerNorm({D})", "x):\n        return self.ln(x)", f"[{X}]", "[]"),
    ("rms_norm", f"self.w = nn.Parameter(torch.ones({D}))",
     "x):\n        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w", f"[{X}]", "[]"),
    ("add_rms_norm", f"self.w = nn.Parameter(torch.ones({D}))",
     "x, r):\n        h = x + r\n        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w, h",
     f"[{X}, {X}]", "[]"),
    ("group_norm", "self.gn = nn.GroupNorm(8, 64)", "x):\n        return self.gn(x)",
     "[torch.randn(16, 64, 32, 32)]", "[]"),
    ("batch_norm_eval", "self.bn = nn.BatchNorm2d(64).eval()", "x):\n        return self.bn(x)",
     "[torch.randn(16, 64, 32, 32)]", "[]"),
    ("instance_norm", "self.n = nn.InstanceNorm2d(32)", "x):\n        return self.n(x)",
     "[torch.randn(8, 32, 64, 64)]", "[]"),
    ("l2_normalize", "", "x):\n        return F.normalize(x, dim=-1)", f"[{X}]", "[]"),
    ("layer_norm_gelu", f"self.ln = nn.LayerNorm({D})", "x):\n        return F.gelu(self.ln(x))", f"[{X}]", "[]"),
    # softmax variants
    ("softmax", "", "x):\n        return torch.softmax(x, dim=-1)", f"[{X}]", "[]"),
    ("log_softmax", "", "x):\n        return torch.log_softmax(x, dim=-1)", f"[{X}]", "[]"),
    ("softmax_temperature", "", "x):\n        return torch.softmax(x / 0.7, dim=-1)", f"[{X}]", "[]"),
    ("masked_softmax", "", "x, m):\n        return torch.softmax(x.masked_fill(m, float('-inf')), dim=-1)",
     f"[{X}, torch.rand({N}, {D}) > 0.9]", "[]"),
    ("softmax_dim0", "", "x):\n        return torch.softmax(x, dim=0)", f"[{X}]", "[]"),
    ("online_logsumexp", "", "x):\n        return torch.logsumexp(x, dim=-1)", f"[{X}]", "[]"),
    # reductions
    ("row_sum", "", "x):\n        return x.sum(dim=-1)", f"[{X}]", "[]"),
    ("col_mean", "", "x):\n        return x.mean(dim=0)", f"[{X}]", "[]"),
    ("row_max_argmax", "", "x):\n        return x.max(dim=-1)", f"[{X}]", "[]"),
    ("variance", "", "x):\n        return x.var(dim=-1)", f"[{X}]", "[]"),
    ("sum_of_squares", "", "x):\n        return (x * x).sum()", f"[{X}]", "[]"),
    ("cumsum_rows", "", "x):\n        return torch.cumsum(x, dim=-1)", f"[{X}]", "[]"),
    ("amax_abs", "", "x):\n        return x.abs().amax(dim=-1)", f"[{X}]", "[]"),
    ("global_avg_pool", "", "x):\n        return x.mean(dim=(2, 3))", "[torch.randn(32, 256, 14, 14)]", "[]"),
    # MLP and attention pieces
    ("linear_gelu", f"self.fc = nn.Linear({D}, {D})", "x):\n        return F.gelu(self.fc(x))", f"[{X}]", "[]"),
    ("mlp_block", f"self.fc1 = nn.Linear({D}, {2 * D})\n        self.fc2 = nn.Linear({2 * D}, {D})",
     "x):\n        return x + self.fc2(F.gelu(self.fc1(x)))", f"[{X}]", "[]"),
    ("swiglu_mlp", f"self.w1 = nn.Linear({D}, {D}, bias=False)\n        self.w3 = nn.Linear({D}, {D}, bias=False)",
     "x):\n        return F.silu(self.w1(x)) * self.w3(x)", f"[{X}]", "[]"),
    ("attention_scores", "", "q, k):\n        return torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1)",
     "[torch.randn(8, 256, 64), torch.randn(8, 256, 64)]", "[]"),
    ("attention_full", "", "q, k, v):\n        a = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)\n"
     "        return a @ v", "[torch.randn(8, 256, 64), torch.randn(8, 256, 64), torch.randn(8, 256, 64)]", "[]"),
    ("causal_mask_softmax", "", "s):\n        n = s.shape[-1]\n"
     "        m = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)\n"
     "        return torch.softmax(s.masked_fill(m, float('-inf')), dim=-1)", "[torch.randn(8, 256, 256)]", "[]"),
    ("qkv_split_scale", "", "x):\n        q, k, v = x.chunk(3, dim=-1)\n        return q * 0.125, k, v",
     f"[torch.randn({N}, {3 * D})]", "[]"),
    ("embedding_scale", f"self.emb = nn.Embedding(32000, {D})",
     "ids):\n        return self.emb(ids) * 32.0", "[torch.randint(0, 32000, (4096,))]", "[]"),
    # losses
    ("cross_entropy", "", "logits, target):\n        return F.cross_entropy(logits, target)",
     f"[{X}, torch.randint(0, {D}, ({N},))]", "[]"),
    ("mse_loss", "", "x, y):\n        return F.mse_loss(x, y)", f"[{X}, {X}]", "[]"),
    ("smooth_l1", "", "x, y):\n        return F.smooth_l1_loss(x, y)", f"[{X}, {X}]", "[]"),
    ("bce_with_logits", "", "x, y):\n        return F.binary_cross_entropy_with_logits(x, y)",
     f"[{X}, torch.rand({N}, {D})]", "[]"),
    ("kl_div", "", "x, y):\n        return F.kl_div(torch.log_softmax(x, -1), torch.softmax(y, -1), "
     "reduction='batchmean')", f"[{X}, {X}]", "[]"),
    ("cosine_embedding", "", "x, y):\n        return 1 - F.cosine_similarity(x, y, dim=-1).mean()",
     f"[{X}, {X}]", "[]"),
    # optimiser steps (functional: inputs in, updated tensors out)
    ("sgd_momentum_step", "", "p, g, buf):\n        buf = buf * 0.9 + g\n        return p - 0.01 * buf, buf",
     f"[{X}, {X}, {X}]", "[]"),
    ("adam_step", "", "p, g, m, v):\n        m = 0.9 * m + 0.1 * g\n        v = 0.999 * v + 0.001 * g * g\n"
     "        return p - 1e-3 * (m / 0.1) / (torch.sqrt(v / 0.001) + 1e-8), m, v",
     f"[{X}, {X}, {X}, {VSQ}]", "[]"),
    ("adamw_step", "", "p, g, m, v):\n        p = p * (1 - 1e-3 * 0.01)\n        m = 0.9 * m + 0.1 * g\n"
     "        v = 0.999 * v + 0.001 * g * g\n        return p - 1e-3 * m / (v.sqrt() + 1e-8), m, v",
     f"[{X}, {X}, {X}, {VSQ}]", "[]"),
    ("grad_clip_scale", "", "g):\n        n = g.norm()\n        return g * torch.clamp(1.0 / (n + 1e-6), max=1.0)",
     f"[{X}]", "[]"),
    ("ema_update", "", "avg, p):\n        return avg * 0.999 + p * 0.001", f"[{X}, {X}]", "[]"),
]

TEMPLATE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init_inputs}
'''


def catalog() -> list[tuple[str, str]]:
    return [(name, TEMPLATE.format(init=init or "pass", forward=fwd, inputs=inputs, init_inputs=init_inputs))
            for name, init, fwd, inputs, init_inputs in PROGRAMS]
