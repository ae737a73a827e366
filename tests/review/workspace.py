"""A fixture workspace for review tests: records that passed harvest..dedupe, with validate evidence."""
from __future__ import annotations

from sftbuild.producers import producers
from sftbuild.record import Record
from sftbuild.store import Store

OPS = ("relu", "exp", "softmax", "layer_norm")


def records(n: int, sources=("llmc", "liger"), languages=("cuda", "triton")) -> list[Record]:
    out = []
    for i in range(n):
        lang = languages[i % len(languages)]
        out.append(Record(language=lang, code=f"__global__ void k{i}(float* y, const float* x) {{ y[0] = x[{i}]; }}\n",
                          source=sources[(i // 2) % len(sources)], entry={"kernels": [f"k{i}"]},
                          binding={"op": OPS[i % len(OPS)], "kind": "op"},
                          provenance={"license": "MIT", "path": f"f{i}.cu"}))
    return out


def payload(rec: Record, gpu: bool = True) -> dict:
    trials = [{"op": rec.binding.op, "shape": [s, 33], "dtype": d, "layout": "contiguous", "seed": seed,
               "ok": True, "max_abs": 1e-6, "max_rel": 2e-6, "norm_rel": 3e-7}
              for s in (7, 1025) for d in ("float32", "float16") for seed in (0, 1)]
    out = {"trials": trials, "errors": {"max_abs": 1e-6, "max_rel": 2e-6, "norm_rel": 3e-7},
           "compile": {"resources": {"registers": 32, "smem": 1024, "spill_stores": 0, "spill_loads": 0,
                                     "stack": 0}}}
    if gpu:
        out["timing"] = {rec.binding.op: {"shape": [1025, 33], "dtype": "float32",
                                          "candidate_ms": {"median": 0.010}, "eager_ms": {"median": 0.015},
                                          "compile_ms": {"median": 0.012}, "speedup": 1.5}}
        out["speedup"] = 1.5
        out["env"] = {"gpu": "NVIDIA H200", "driver": 12080, "cuda": "12.8", "torch": "2.11.0", "triton": "3.5.0"}
    return out


def make(ws, n: int = 80, dedupe_ok=None, **kw) -> list[Record]:
    """A store where n records passed every stage before review; dedupe keeps `dedupe_ok` (default all)."""
    s = Store(ws)
    recs = records(n, **kw)
    s.add_records(recs)
    for stage in ("harvest", "bind", "describe", "validate"):
        s.set_stage_config(stage, "c", {}, producers(stage))  # results of this code
        rows = []
        for r in recs:
            p = {}
            if stage == "describe":
                p = {"instructions": {"en:detailed": f"Write the CUDA kernel k for {r.binding.op}."}}
            elif stage == "validate":
                p = payload(r, gpu=r.language == "cuda")
            rows.append((r.id, stage, "c", "ok", None, p))
        s.put_results(rows)
    dedupe(s, recs if dedupe_ok is None else dedupe_ok, "c")
    s.close()
    return recs


def dedupe(store: Store, keep: list[Record], chash: str) -> None:
    """As if dedupe ran under config `chash` and kept `keep`."""
    store.set_stage_config("dedupe", chash, {"run": chash})
    keep_ids = {r.id for r in keep}
    store.put_results([(r.id, "dedupe", chash, "ok" if r.id in keep_ids else "dropped",
                        None if r.id in keep_ids else "near_duplicate", {}) for r in store.records()])
