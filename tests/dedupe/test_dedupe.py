"""Unit tests of the dedupe stage: normalisation, signatures, filters, decontamination, stage."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sftbuild.config import Config
from sftbuild.dedupe import fingerprints
from sftbuild.dedupe import filters as F
from sftbuild.dedupe.decontam import Decontaminator
from sftbuild.dedupe.near import Doc, find_clusters, rank_key
from sftbuild.dedupe.normalize import abstract_tokens, normalize, strip_comments, tokens
from sftbuild.dedupe.params import Params
from sftbuild.dedupe.signature import compute, h64, token_hash
from sftbuild.record import Record

KERNELS = Path(__file__).parents[1] / "data" / "dedupe" / "kernels"

ADD = """// SPDX-License-Identifier: MIT
/* Copyright 2024 */
__global__ void add(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // global index
    if (i < n) out[i] = a[i] + b[i];
}
"""


def kernel(name: str) -> str:
    return (KERNELS / name).read_text()


# ---- normalisation -----------------------------------------------------------
def test_normalize_strips_comments_and_whitespace_keeps_case():
    a = normalize(ADD, "cuda")
    b = normalize("__global__ void add(const float*a,const float*b,float*out,int n){int i=blockIdx.x*blockDim.x"
                  "+threadIdx.x;\n\n if(i<n)out[i]=a[i]+b[i];}", "cuda")
    assert a == b
    assert "SPDX" not in a and "Copyright" not in a and "global index" not in a
    assert "blockIdx" in a.split() and "blockidx" not in a.split()


def test_strip_comments_keeps_string_literals():
    code = 'printf("http://x /* y */"); // gone\n/* gone */ int a;'
    out = strip_comments(code, "cuda")
    assert '"http://x /* y */"' in out and "gone" not in out


def test_python_comments_and_docstrings_removed_strings_kept():
    code = '''# Copyright 2023 Someone\n"""Module docstring, licence text."""\nimport triton\n\n\n@triton.jit
def k(x_ptr):\n    """Kernel docstring."""\n    s = "# not a comment"  # a comment\n    return s\n'''
    toks = tokens(code, "triton")
    assert "docstring" not in toks and "Copyright" not in toks and "comment" not in " ".join(toks[:-4])
    assert '"# not a comment"' not in toks  # strings are tokenised, not dropped
    assert "not" in toks


def test_kernelbench_strips_cuda_comments_inside_source_strings():
    code = 'src = """\n// a comment in CUDA\n__global__ void k() {}\n"""\nx = 7 // 2\n'
    toks = tokens(code, "kernelbench")
    assert "comment" not in toks and "__global__" in toks and toks[-3:] == ["/", "/", "2"]


def test_abstract_tokens_number_identifiers_by_first_appearance():
    toks = abstract_tokens(tokens("__global__ void k(float* x, int n) { int i = threadIdx.x; x[i] = n; }",
                                  "cuda"))
    assert toks[:3] == ["__global__", "void", "$0"]
    assert "threadIdx" in toks and "." in toks and toks[toks.index("threadIdx") + 2] == "x"
    assert toks.count("$1") == 2 and "$3" in toks  # x twice, i is the fourth name
    tl = abstract_tokens(tokens("y = tl.load(p + offs, mask=m)", "triton"))
    assert tl == ["$0", "=", "tl", ".", "load", "(", "$1", "+", "$2", ",", "mask", "=", "$3", ")"]


def test_vectorised_abstraction_matches_reference():
    code = kernel("sum__warp_shuffle.cu")
    ref = abstract_tokens(tokens(code, "cuda"))
    want = np.array([h64(t) & ~1 if t.startswith("$") else token_hash(t) for t in ref], dtype=np.uint64)
    sig = compute([code], ["cuda"], Params(ngram=1, short_ngram=1))  # unigrams: one shingle per token
    assert np.array_equal(sig.abstract.set(0), np.unique(_unigram_fingerprints(want)))


def _unigram_fingerprints(hashes: np.ndarray) -> np.ndarray:
    from sftbuild.dedupe.signature import fmix64

    with np.errstate(over="ignore"):
        return (fmix64(hashes ^ np.uint64(h64("shingle-seed-1"))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


# ---- signatures ----------------------------------------------------------------
def test_affine32_is_bit_identical_to_datasketch():
    from datasketch import MinHash

    p = Params(scheme="affine32")
    sig = compute([kernel("matmul__tiled.cu")], ["cuda"], p)
    m = MinHash(num_perm=p.num_perm, seed=p.seed, hashfunc=int, scheme="affine32")
    m.update_batch([int(v) for v in sig.plain.set(0)])
    assert np.array_equal(m.hashvalues, sig.plain.sig[0])


@pytest.mark.parametrize("scheme", ["oph", "affine32"])
def test_signature_collision_rate_estimates_jaccard(scheme):
    p = Params(scheme=scheme)
    a = kernel("softmax__block_row.cu")
    b = a.replace("fmaxf", "max").replace("total", "acc")
    sig = compute([a, b], ["cuda", "cuda"], p)
    x, y = sig.plain.set(0), sig.plain.set(1)
    inter = len(np.intersect1d(x, y))
    true_j = inter / (len(x) + len(y) - inter)
    est = float((sig.plain.sig[0] == sig.plain.sig[1]).mean())
    assert abs(est - true_j) < 0.12, (est, true_j)


def test_short_kernels_use_short_ngrams():
    p = Params()
    short = "__global__ void k(float* x) { x[0] = 1; }"
    sig = compute([short], ["cuda"], p)
    assert sig.n_tokens[0] < p.short_tokens
    assert len(sig.plain.set(0)) == sig.n_tokens[0] - p.short_ngram + 1


def test_manifest_records_datasketch_version_and_scheme():
    import datasketch

    m = Params().manifest()
    assert m["datasketch"] == datasketch.__version__
    assert m["scheme"] == "oph" and "permutation_scheme" in m
    assert (m["ngram"], m["num_perm"], m["bands"], m["rows"], m["threshold"]) == (5, 256, 32, 8, 0.7)


# ---- clustering ------------------------------------------------------------------
def test_representative_order():
    docs = [Doc("a", ADD, validated=False, speedup=9.0, license="MIT"),
            Doc("b", ADD + "\n", validated=True, speedup=1.0, license=None),
            Doc("c", ADD + "\n\n", validated=True, speedup=2.0, license="unknown"),
            Doc("d", ADD + "\n\n\n", validated=True, speedup=2.0, license="MIT")]
    res = find_clusters(docs)
    assert res.clusters == [["d", "a", "b", "c"]]
    assert res.dropped["a"] == {"duplicate_of": "d", "similarity": 1.0, "signature": "exact"}
    # then source priority, then id
    x = Doc("x", ADD, validated=True, speedup=2.0, license="MIT", priority=1)
    y = Doc("y", ADD, validated=True, speedup=2.0, license="MIT", priority=2)
    z = Doc("z", ADD, validated=True, speedup=2.0, license="MIT", priority=2)
    assert sorted([x, y, z], key=rank_key)[0] is y


def test_abstract_links_only_same_op():
    base = kernel("transpose__naive.cu")
    renamed = base.replace("src", "inp").replace("dst", "outp").replace("height", "H").replace("width", "W")
    same_op = find_clusters([Doc("a", base, op="transpose"), Doc("b", renamed, op="transpose")])
    assert same_op.dropped and next(iter(same_op.dropped.values()))["signature"] == "abstract"
    other_op = find_clusters([Doc("a", base, op="transpose"), Doc("b", renamed, op="permute")])
    assert not other_op.dropped
    unbound = find_clusters([Doc("a", base), Doc("b", renamed)])
    assert unbound.dropped


def test_deterministic_across_workers():
    docs = []
    for path in sorted(KERNELS.iterdir()):
        lang = "cuda" if path.suffix == ".cu" else "triton"
        text = path.read_text()
        docs.append(Doc(path.stem, text, lang, op=path.stem.split("__")[0]))
        docs.append(Doc(path.stem + "+", text.replace("    ", "  ") + "\n", lang, op=path.stem.split("__")[0]))
    p = Params(chunk_size=7)  # several chunks, so two workers really split the work
    one = find_clusters(docs, p, workers=1)
    two = find_clusters(list(reversed(docs)), p, workers=2)
    assert one.clusters == two.clusters and one.dropped == two.dropped
    assert len(one.clusters) == len(list(KERNELS.iterdir()))


# ---- filters ---------------------------------------------------------------------
def drop(doc: Doc, selection=None):
    return F.apply(F.configured(selection), doc)


GOOD = kernel("relu__basic.cu")


def test_filter_keeps_good_kernel():
    assert drop(Doc("g", GOOD, license="MIT")) is None


def test_filter_too_simple():
    assert drop(Doc("t", "__global__ void k(float* x) { x[0] = 1; }", license="MIT"))[0] == "too_simple"
    empty = "__global__ void k(const float* a, float* b, int n, int m, int q, int r, int s) {\n  return;\n}\n"
    assert drop(Doc("e", empty, license="MIT")) == ("too_simple", {"filter": "too_simple",
                                                                  "detail": "every kernel body is empty"})
    tri = "import triton\n@triton.jit\ndef k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    # todo\n    pass\n"
    assert drop(Doc("p", tri, "triton", license="MIT"))[0] == "too_simple"


def test_filter_malformed():
    assert drop(Doc("l", GOOD + "x" * 1200, license="MIT"))[0] == "malformed"
    assert drop(Doc("c", GOOD + "\x01", license="MIT"))[0] == "malformed"
    assert drop(Doc("u", GOOD + "\ufffd", license="MIT"))[0] == "malformed"


def test_filter_generated_with_inductor_exempt():
    gen = "// @generated by a tool, DO NOT EDIT\n" + GOOD
    assert drop(Doc("g", gen, license="MIT"))[0] == "generated"
    assert drop(Doc("i", gen, license="MIT", source_kind="inductor")) is None


def test_filter_no_kernel():
    assert drop(Doc("c", GOOD.replace("__global__", "__device__"), license="MIT"))[0] == "no_kernel"
    tri = kernel("add__triton.py")
    assert drop(Doc("t", tri, "triton", license="MIT")) is None
    assert drop(Doc("t", tri.replace("@triton.jit", ""), "triton", license="MIT"))[0] == "no_kernel"
    kb = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x) + 1.0 * x\n"
    assert drop(Doc("k", kb, "kernelbench", license="MIT"))[0] == "no_kernel"
    assert drop(Doc("k", kb.replace("class Model", "class ModelNew"), "kernelbench", license="MIT")) is None


def test_filter_license_policy():
    for lic in (None, "", "unknown", "NOASSERTION"):
        assert drop(Doc("x", GOOD, license=lic))[0] == "license"
    assert drop(Doc("x", GOOD, license="GPL-3.0-only")) is None  # empty allow-list: any known licence

    allow = {"license": {"allowed": ["MIT", "Apache-2.0"]}}
    assert drop(Doc("x", GOOD, license="mit"), allow) is None
    assert drop(Doc("x", GOOD, license="GPL-3.0-only"), allow)[0] == "license"
    assert drop(Doc("x", GOOD, license="GPL-3.0-only OR MIT"), allow) is None
    assert drop(Doc("x", GOOD, license="MIT AND GPL-3.0-only"), allow)[0] == "license"
    assert drop(Doc("x", GOOD, license="Apache-2.0 WITH LLVM-exception"), allow) is None


# ---- decontamination ---------------------------------------------------------------
PROBLEMS = {
    "level1/19_ReLU.py": """import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    \"\"\"Simple ReLU.\"\"\"
    def __init__(self):\n        super(Model, self).__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)\n\nbatch_size = 16\ndim = 16384\n\ndef get_inputs():
    x = torch.randn(batch_size, dim)\n    return [x]\n\ndef get_init_inputs():\n    return []\n""",
    "level1/23_Softmax.py": """import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):
    def __init__(self):\n        super(Model, self).__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)\n\nbatch_size = 16\ndim = 16384\n\ndef get_inputs():
    x = torch.randn(batch_size, dim)\n    return [x]\n\ndef get_init_inputs():\n    return []\n""",
    "level2/7_Conv_GELU_Scale.py": """import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale\n\n    def forward(self, x):
        x = self.conv(x)\n        x = torch.nn.functional.gelu(x)\n        return x * self.scale\n
batch_size = 128\nin_channels = 3\nout_channels = 16\nheight, width = 32, 32\nkernel_size = 3\nscale = 2.0\n
def get_inputs():\n    return [torch.randn(batch_size, in_channels, height, width)]\n
def get_init_inputs():\n    return [in_channels, out_channels, kernel_size, scale]\n""",
}


@pytest.fixture
def bench_dir(tmp_path):
    root = tmp_path / "KernelBench"
    for name, text in PROBLEMS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


SOLUTION = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
__global__ void conv_gelu_scale(const float* x, float* y, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.f + erff(v * 0.70710678f)) * scale; }
}
"""

class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale

    def forward(self, x):
        return self.op.conv_gelu_scale_cuda(self.conv(x), self.scale)
'''


def test_decontamination_matches_reference_and_code(bench_dir):
    dec = Decontaminator([bench_dir], threshold=0.5)
    ref = PROBLEMS["level2/7_Conv_GELU_Scale.py"]
    m = dec.match(Doc("k", SOLUTION, "kernelbench", reference=ref))
    assert m is not None and m.item == "level2/7_Conv_GELU_Scale.py" and m.field == "reference"
    # a copy of the benchmark program in the code itself
    m = dec.match(Doc("k", SOLUTION + "\n" + PROBLEMS["level1/23_Softmax.py"], "kernelbench"))
    assert m is not None and m.item == "level1/23_Softmax.py" and m.field == "code"
    # shared boilerplate alone (get_inputs, batch_size) is no match
    assert dec.match(Doc("k", SOLUTION, "kernelbench")) is None
    assert dec.match(Doc("c", GOOD, "cuda")) is None


def test_fingerprints_save_and_reuse(bench_dir, tmp_path):
    out = tmp_path / "kb.fp"
    fp = fingerprints.save(bench_dir, out)
    assert out.exists() and fingerprints.is_fingerprint_file(out)
    assert b"torch.relu" not in out.read_bytes()  # hashes only, no benchmark text
    again = fingerprints.load(out)
    assert again.names == fp.names and np.array_equal(again.values, fp.values)
    assert again.digest() == fp.digest()
    dec = Decontaminator([out])
    m = dec.match(Doc("k", SOLUTION, "kernelbench", reference=PROBLEMS["level1/19_ReLU.py"]))
    assert m is not None and m.item == "level1/19_ReLU.py"
    with pytest.raises(ValueError, match="ngram"):
        fingerprints.load(out, ngram=7)


def test_benchmark_dataset_file(tmp_path):
    path = tmp_path / "bench.jsonl"
    with open(path, "w") as f:
        for name, text in PROBLEMS.items():
            f.write(json.dumps({"name": name, "code": text}) + "\n")
    dec = Decontaminator([path])
    assert len(dec.names) == 3
    m = dec.match(Doc("k", SOLUTION, "kernelbench", reference=PROBLEMS["level1/23_Softmax.py"]))
    assert m is not None and m.item == "bench.jsonl:level1/23_Softmax.py"


# ---- the stage on a real store ----------------------------------------------------
def _record(code: str, language: str = "cuda", op: str | None = None, **prov) -> Record:
    return Record(language=language, code=code, source="test", entry={"kernels": ["k"]},
                  binding={"kind": "op", "op": op} if op else None,
                  provenance={"source_kind": "git", "license": "MIT", **prov})


def test_stage_on_store(tmp_path, bench_dir, make_ctx):
    from sftbuild.dedupe import stage

    cfg = Config()
    cfg.dedupe.benchmarks = [str(bench_dir)]
    ctx = make_ctx(gpus="none", config=cfg)
    store = ctx.store
    base = kernel("sum__shared_tree.cu")
    recs = {
        "rep": _record(base, op="sum", priority=1),
        "dup": _record(base.replace("// Sum reduction", "// a different comment"), op="sum"),
        "renamed": _record(base.replace("cache", "smem").replace("partial", "out_part").replace("acc", "total"),
                           op="sum"),
        "other": _record(kernel("sum__warp_shuffle.cu"), op="sum"),
        "tiny": _record("__global__ void k(float* x) { x[0] = 1; }"),
        "nolic": _record(kernel("matmul__naive.cu"), license="NOASSERTION"),
        "contam": Record(language="kernelbench", code=SOLUTION, source="test",
                         binding={"kind": "kernelbench", "op": "conv_gelu",
                                  "reference": PROBLEMS["level2/7_Conv_GELU_Scale.py"]},
                         provenance={"license": "MIT"}),
    }
    store.add_records(recs.values())
    # earlier stages: everything ok; validation gives the speed-ups
    for st in ("harvest", "bind", "describe", "validate"):
        store.set_stage_config(st, "h", {})
        store.put_results([(r.id, st, "h", "ok", None,
                            {"speedup": 2.0} if (st == "validate" and k == "rep") else {})
                           for k, r in recs.items()])
    report = stage.run(ctx)
    res = store.results_for("dedupe")
    again = stage.run(ctx)
    by = {k: res[r.id] for k, r in recs.items()}
    assert by["rep"]["status"] == "ok" and by["other"]["status"] == "ok"
    assert by["dup"]["reason"] == "duplicate" and by["dup"]["payload"]["duplicate_of"] == recs["rep"].id
    assert by["renamed"]["reason"] == "duplicate" and by["renamed"]["payload"]["signature"] in ("abstract", "plain")
    assert by["tiny"]["reason"] == "too_simple"
    assert by["nolic"]["reason"] == "license"
    assert by["contam"]["reason"] == "contaminated"
    assert by["contam"]["payload"]["item"] == "level2/7_Conv_GELU_Scale.py"
    saved = json.loads((tmp_path / "ws" / "reports" / "dedupe.json").read_text())
    assert saved["counts"]["by_reason"] == {"contaminated": 1, "duplicate": 2, "license": 1, "too_simple": 1}
    assert saved["clusters"]["size_histogram"] == {"3": 1}
    assert saved["clusters"]["largest"][0]["members"][0]["id"] == recs["rep"].id
    assert report["counts"] == saved["counts"] and again["counts"] == saved["counts"]
    manifest = store.manifests()[-1]
    assert manifest["stage"] == "dedupe" and "datasketch" in manifest["config"]["params"]
    assert manifest["config"]["params"]["permutation_scheme"]


def test_generator_metadata_does_not_make_kernels_alike():
    from sftbuild.dedupe import normalize as N

    def kernel(name, body):
        return ("import triton\nimport triton.language as tl\nfrom torch._inductor.runtime import triton_helpers\n\n"
                "@triton_heuristics.pointwise(\n    size_hints={'x': 8},\n    triton_meta={'signature': "
                "{'out_ptr0': '*fp32'}, 'device': DeviceProperties(type='cuda', cc=90), 'note': 'a (paren'},\n"
                f"    inductor_meta={{'kernel_name': '{name}', 'autotune_hints': set()}},\n)\n@triton.jit\n"
                f"def {name}(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n{body}")

    toks = N.tokens(kernel("k", "    tl.store(out_ptr0, tl.load(in_ptr0))\n"), "triton")
    assert "import" not in toks and "DeviceProperties" not in toks and "size_hints" not in toks
    assert toks[:6] == ["@", "triton_heuristics", ".", "pointwise", "@", "triton"]
    assert "store" in toks and "load" in toks


def test_op_less_bindings_are_told_apart_by_what_they_compute():
    from sftbuild.dedupe.analysis import to_doc
    from sftbuild.record import Record

    k = Record(language="triton", code="x", source="s", entry={"aten": ["aten.relu", "aten.add"]},
               binding={"kind": "inductor", "program": "p"})
    pair = Record(language="kernelbench", code="y", source="s", entry={}, binding={"kind": "kernelbench", "program": "p"})
    op = Record(language="triton", code="z", source="s", entry={}, binding={"kind": "op", "op": "relu"})
    assert [to_doc(r, None).op for r in (k, pair, op)] == ["inductor:aten.add+aten.relu", "program:p", "relu"]


def test_analysis_tasks_are_bounded_in_code_and_the_split_changes_nothing():
    """Large records are analysed a few MB of code per task (a worker held 2 GB for 1,500 records of
    40 KB), and how the documents are split never changes a drop or a signature."""
    from sftbuild.dedupe.analysis import analyse, chunks

    docs = [Doc(f"d{i}", text=f"__global__ void k{i}(float* x) {{ x[{i}] = {i % 3} * x[0]; }}\n" * (1 + i % 5))
            for i in range(12)]
    parts = list(chunks(docs, 5, max_bytes=300))
    assert [d for p in parts for d in p] == docs and all(len(p) <= 5 for p in parts)
    assert all(sum(len(d.text) for d in p) <= 300 or len(p) == 1 for p in parts) and len(parts) > 3
    whole = analyse(docs, Params(chunk_size=100), [], every=True)
    split = analyse(docs, Params(chunk_size=1), [], every=True)
    assert whole[0] == split[0]
    for name in ("plain", "abstract"):
        a, b = getattr(whole[2], name), getattr(split[2], name)
        assert (a.sig == b.sig).all() and (a.values == b.values).all() and (a.offsets == b.offsets).all()
