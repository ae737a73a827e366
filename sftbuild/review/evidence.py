"""What a reviewer sees of one record: the evidence behind its validation, in every view.

`gather(store, record_id)` reads the record, its instructions, its validate result payload and
verdict-log environment, and the reference (the op's torch function, or the program a pair or
Inductor record carries) into one `Evidence`; `lines(ev)` is its text form (`review show`, the
terminal flow) and `as_dict(ev)` its JSON form (the browser page, review packets).

The first line says what the record is and where it was checked; records that are unbound, or
were validated only on the CPU in the Triton interpreter, say so there.
Nothing here runs record code: the reference shown for an op is sftbuild's own function.
"""
from __future__ import annotations

import dataclasses
import json

from sftbuild.record import Record
from sftbuild.store import Store

REASONS = {"d": "wrong_description", "c": "wrong_code", "l": "license", "t": "trivial", "u": "unsafe", "o": "other"}


@dataclasses.dataclass
class Evidence:
    record: Record
    headline: str
    where: str  # gpu | interpreter | none
    status: str | None
    reason: str | None
    instructions: dict
    trials: dict  # count, passed, shapes, dtypes, layouts, seeds
    errors: dict  # worst error per metric
    tolerance: dict  # dtype -> {rtol, atol, norm, slack}
    timing: list[dict]
    resources: dict
    env: dict
    reference: dict  # {kind, title, source}
    flags: dict
    detail: str

    @property
    def language(self) -> str:
        return self.record.language


def gather(store: Store, record_id: str) -> Evidence:
    rec = store.get(record_id)
    desc = store.result(rec.id, "describe") or {}
    val = store.result(rec.id, "validate") or {}
    payload = val.get("payload") or {}
    logged = [v for v in store.verdicts(rec.id) if v["stage"] == "validate"]
    env = {**(logged[-1]["env"] if logged else {}), **(payload.get("env") or {})}
    trials = payload.get("trials") or []
    where = "gpu" if env.get("gpu") else ("interpreter" if val.get("status") == "ok" and trials else "none")
    ev = Evidence(
        record=rec, headline="", where=where, status=val.get("status"), reason=val.get("reason"),
        instructions=(desc.get("payload") or {}).get("instructions") or {},
        trials=_trials(trials), errors=payload.get("errors") or {},
        tolerance=_tolerance(rec, sorted({t.get("dtype") for t in trials if t.get("dtype")})),
        timing=_timing(payload.get("timing") or {}),
        resources=((payload.get("compile") or {}).get("resources") or {}),
        env={k: env.get(k) for k in ("gpu", "driver", "cuda", "nvcc", "torch", "triton", "host") if env.get(k)},
        reference=_reference(rec), flags=payload.get("flags") or {},
        detail=str(payload.get("detail") or payload.get("why") or "")[:600])
    ev.headline = _headline(ev, payload)
    return ev


def _headline(ev: Evidence, payload: dict) -> str:
    rec = ev.record
    what = _what(rec)
    if not rec.binding:
        return f"UNBOUND {rec.language} kernel: no torch reference, so correctness was never checked"
    if ev.status is None:
        return f"NOT VALIDATED YET: {what}"
    if ev.status != "ok":
        return f"NOT VALIDATED ({ev.status}: {ev.reason}): {what}"
    passed = f"{ev.trials['passed']} of {ev.trials['count']} trials passed"
    if ev.where == "none":
        return f"NO EVIDENCE: validate says ok for this {what}, but recorded no trials and no GPU"
    if ev.where == "interpreter":
        return f"INTERPRETER ONLY: {what}; {passed} on CPU with TRITON_INTERPRET=1, never on a GPU"
    speed = f", {payload['speedup']:.2f}x eager" if payload.get("speedup") else ""
    return f"GPU-VALIDATED on {ev.env.get('gpu')}: {what}; {passed}{speed}"


def _what(rec: Record) -> str:
    b = rec.binding
    if b and b.op:
        return f"{rec.language} kernel bound to op {b.op}"
    if b:
        kind = b.kind if b.kind == rec.language else f"{rec.language} {b.kind}"
        return f"{kind} record checked against its reference program"
    return f"{rec.language} kernel"


def _trials(rows: list[dict]) -> dict:
    def uniq(key):
        return list(dict.fromkeys(json.dumps(r[key], sort_keys=True) if isinstance(r[key], (list, dict))
                                  else r[key] for r in rows if r.get(key) is not None))
    return {"count": len(rows), "passed": sum(1 for r in rows if r.get("ok")), "shapes": uniq("shape")[:12],
            "dtypes": uniq("dtype"), "layouts": uniq("layout") or ["contiguous"], "seeds": uniq("seed"),
            "ops": uniq("op")}


def _tolerance(rec: Record, dtypes: list[str]) -> dict:
    from sftbuild.ops import cards
    from sftbuild.ops.tolerance import Tolerance

    b = rec.binding
    if b and b.op:
        card = cards.cards([b.op])[b.op]
        tol = card and cards.tolerance(card)
    else:
        tol = Tolerance(scale=4.0) if b else None
    if tol is None:
        return {}
    out = {}
    for d in dtypes:
        rtol, atol, norm = tol.floors(d)
        out[d] = {"rtol": rtol, "atol": atol, "norm_rel": norm, "slack": tol.slack, "exact": tol.exact}
    return out


def _timing(timing: dict) -> list[dict]:
    out = []
    for name, t in timing.items():
        if not isinstance(t, dict) or "candidate_ms" not in t:
            continue
        out.append({"name": name, "shape": t.get("shape"), "dtype": t.get("dtype"),
                    "candidate_ms": (t.get("candidate_ms") or {}).get("median"),
                    "eager_ms": (t.get("eager_ms") or {}).get("median"),
                    "compile_ms": (t.get("compile_ms") or {}).get("median"), "speedup": t.get("speedup")})
    return out


def _reference(rec: Record) -> dict:
    b = rec.binding
    if b and isinstance(b.reference, str):
        return {"kind": "program", "title": f"reference program ({b.kind})", "source": b.reference,
                "language": "python"}
    if b and b.how == "file_reference":
        ref = (b.harness_args or {}).get("ref") or {}
        return {"kind": "program", "title": f"CPU reference {ref.get('cpu', '')} in {b.program or ''}, "
                f"called through the launcher {ref.get('launcher', '')}", "source": ref.get("cpu_code", ""),
                "language": "cpp"}
    if b and b.op:
        from sftbuild.ops.cards import cards

        op = cards([b.op])[b.op]
        if op is None:
            return {"kind": "op", "title": f"op {b.op} (not in this sftbuild's registry)", "source": "",
                    "language": "python"}
        io = "\n".join(f"#   {k}: {', '.join(v)}" for k, v in op["io"].items())
        head = f"# {op['name']} ({op['family']}): {op['semantics'].get('en', '')}\n{io}\n"
        params = {**op["params"], **b.params}
        if params:
            head += f"# params: {json.dumps(params, sort_keys=True)}\n"
        return {"kind": "op", "title": f"op {op['name']} (torch reference)", "source": head + op["source"],
                "language": "python"}
    return {"kind": "none", "title": "no reference: the kernel is unbound", "source": "", "language": "text"}


def _num(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def lines(ev: Evidence) -> list[str]:
    """The text form: headline first, then what was tried, errors, timing, resources, versions."""
    rec, t = ev.record, ev.trials
    # the program is shown whole
    binding = {k: v for k, v in rec.binding.to_dict().items() if k != "reference"} if rec.binding else {}
    out = [ev.headline, f"id: {rec.id}   source: {rec.source}   language: {rec.language}   "
           f"license: {rec.provenance.get('license', '?')}   path: {rec.provenance.get('path', '?')}",
           f"binding: {json.dumps(binding, sort_keys=True)[:300] if rec.binding else 'none'}"]
    for o in (rec.provenance.get("origins") or [])[1:]:  # the same code found elsewhere too
        declared = (o.get("binding") or {}).get("op") or (o.get("binding") or {}).get("kind")
        out.append(f"also in: {o['source']}   path: {o['path'] or '?'}   license: {o.get('license') or '?'}"
                   + (f"   declared: {declared}" if declared else ""))
    if ev.status:
        out.append(f"validate: {ev.status}{' ' + ev.reason if ev.reason else ''}"
                   + (f" ({ev.detail})" if ev.detail and ev.status != "ok" else ""))
    if t["count"]:
        out.append(f"trials: {t['passed']}/{t['count']} passed; shapes {', '.join(map(str, t['shapes']))}; "
                   f"dtypes {', '.join(t['dtypes'])}; layouts {', '.join(t['layouts'])}; "
                   f"seeds {', '.join(map(str, t['seeds']))}")
    if ev.errors:
        errs = ", ".join(f"{k} {_num(v)}" for k, v in sorted(ev.errors.items()))
        tols = "; ".join(f"{d}: rtol {_num(v['rtol'])}, atol {_num(v['atol'])}*max|ref|, norm {_num(v['norm_rel'])}"
                         f" (or {v['slack']:g}x torch's own error)" for d, v in ev.tolerance.items())
        out.append(f"worst error: {errs}   tolerance: {tols or '-'}")
    for tm in ev.timing:
        comp = f", torch.compile {_num(tm['compile_ms'])} ms" if tm["compile_ms"] else ", torch.compile not timed"
        out.append(f"timing [{tm['name']}] {tm['dtype'] or ''} {tm['shape'] or ''}: candidate "
                   f"{_num(tm['candidate_ms'])} ms vs eager {_num(tm['eager_ms'])} ms "
                   f"({_num(tm['speedup'])}x){comp}")
    if ev.status == "ok" and not ev.timing:
        out.append("timing: not measured" + (" (interpreter run)" if ev.where == "interpreter" else ""))
    if ev.resources:
        r = ev.resources
        out.append(f"resources: registers {r.get('registers', '-')}, smem {r.get('smem', '-')} B, spills "
                   f"{r.get('spill_stores', 0)}+{r.get('spill_loads', 0)} B, stack {r.get('stack', '-')} B")
    if ev.env:
        out.append("env: " + ", ".join(f"{k} {v}" for k, v in ev.env.items()))
    if ev.flags:
        out.append(f"flags: {json.dumps(ev.flags, sort_keys=True)[:300]}")
    for k, v in sorted(ev.instructions.items()):
        out.append(f"instruction[{k}]: {v}")
    return out


def as_dict(ev: Evidence) -> dict:
    """The JSON form: every field, the record's code and the evidence lines."""
    d = {f.name: getattr(ev, f.name) for f in dataclasses.fields(ev) if f.name != "record"}
    rec = ev.record
    return {**d, "id": rec.id, "name": rec.name, "source": rec.source, "language": rec.language,
            "code": rec.code, "license": rec.provenance.get("license"), "lines": lines(ev)}
