"""The compile gate: nvcc to a cubin (and, for bound kernels, a launchable .so).

Runs in the CPU pool. Each compile has a timeout and a memory limit, and its
result is cached under the workspace by a hash of the code, the flags and the
toolchain version, so a rerun or a duplicate costs nothing; processes that share a
cache (workers, or test runs in parallel) build each key once.

A record's own headers travel with it (`entry["headers"]`: {path in its tree: text},
`entry["include_dirs"]`: folders of that tree, the kernel's own first; see
`sftbuild.harvest.cuda_extract.local_headers`): the compile lays them out under its build
folder, writes the kernel into its own folder there and puts the folders on the command
line. Headers are hostile input too: an `#include` that is absolute, computed by a macro,
or whose `..` would leave that tree fails the gate as `unsafe_include` before nvcc runs.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import json
import os
import re
import time
import tokenize
from pathlib import Path

from sftbuild import sandbox
from sftbuild.parsing import params, strip_comments
from sftbuild.context import NvccMissing, find_nvcc, nvcc_version  # noqa: F401  (re-exported)
from sftbuild.trial_types import CompileTask
from sftbuild.trial import logs
from sftbuild.trial.include_sets import nvcc_args
from sftbuild.trial import nvcc_parallel

# a launchable harness's host code: nvcc leaves the host compiler at -O0, and a file's CPU reference
# runs in it (llm.c's matmul_forward_cpu: 3-5 x slower unoptimized); -O2 keeps IEEE arithmetic (no
# fast-math, no FMA contraction on the baseline x86-64 target), so the results are the same
HOST_FLAGS = ["-O2"]
ENTRY = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str) -> dict:
    """Per-kernel resources from `-Xptxas -v` output, and the worst case over kernels."""
    kernels: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        m = ENTRY.search(line)
        if m:
            current = kernels.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        m = FRAME.search(line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = USED.search(line)
        if m:
            current.update(registers=int(m.group(1)), barriers=int(m.group(2) or 0), smem=int(m.group(3) or 0))
    worst = {k: max((v.get(k, 0) for v in kernels.values()), default=0)
             for k in ("registers", "smem", "stack", "spill_stores", "spill_loads")}
    return {"kernels": kernels, **worst}


def compile_task(task: CompileTask | dict) -> dict:
    """Compile one record's kernel, or one harness with it (sftbuild.trial_types.CompileTask).
    Returns {ok, reason, log, resources, so, seconds, cached}."""
    task = CompileTask.of(task)
    link = task.link
    nvcc = find_nvcc(task.nvcc)
    headers, dirs = task.headers, task.include_dirs
    unsafe = unsafe_include(task.code, headers, dirs)
    if unsafe:
        return {"ok": False, "reason": "unsafe_include", "log": unsafe, "seconds": 0.0, "cached": False}
    # the same include sets and defines the harvest's compile-on-its-own check uses
    flags = nvcc_args(task.include_sets) + ["-lineinfo", f"-arch={task.arch}"]
    if headers:
        flags = [f"-I{TREE}/{d}" for d in dirs or ["."]] + flags
    host = HOST_FLAGS if task.harness and link else []
    key = hashlib.sha256(json.dumps([task.code, task.harness, flags, link, nvcc_version(), headers]
                                    + ([host] if host else [])).encode()).hexdigest()[:24]
    out_dir = Path(task.cache_dir) / key
    res = once(out_dir, lambda: _compile(task, out_dir, nvcc, flags, link, key),
               valid=lambda res: not res.get("so") or Path(res["so"]).exists())
    if res.get("reason") == "compile_error":  # judged on reading, so a cached failure gets today's judgement
        reason, where = blame(res.get("log", ""), task.code + (task.harness or ""), headers)
        res = {**res, "reason": reason, **({"where": where} if where else {})}
    return res


def once(out_dir: Path, build, valid=lambda res: True) -> dict:
    """The result kept in `out_dir` for its key, or `build()`'s: processes sharing a cache build a key
    once, and the others wait for it and read it ("cached": True). `build` returns (result, keep): a
    result not kept (a timeout) is built again next time; `valid(result)` says a kept one still holds."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = out_dir / "result.json"
    with open(out_dir / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            res = json.loads(done.read_text())
            if valid(res):
                return {**res, "cached": True}
        res, keep = build()
        if keep:
            done.write_text(json.dumps(res))
        return {**res, "cached": False}


def _compile(task: CompileTask, out_dir: Path, nvcc: str, flags: list, link: bool, key: str) -> tuple[dict, bool]:
    headers = task.headers
    if headers:  # the record's tree, with the kernel in its own folder (the first include folder)
        for rel, text in headers.items():
            dest = out_dir / TREE / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        own = out_dir / TREE / ((task.include_dirs or ["."])[0])
        own.mkdir(parents=True, exist_ok=True)
        (own / "kernel.cuh").write_text(task.code, encoding="utf-8")
    else:
        (out_dir / "kernel.cuh").write_text(task.code, encoding="utf-8")
    if task.harness and link:
        (out_dir / "harness.cu").write_text(task.harness, encoding="utf-8")
        cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", *HOST_FLAGS, "-Xptxas", "-v", *flags, "harness.cu", "-o",
               "harness.so"]
    elif task.harness:  # instantiates the kernel for real ptxas figures, skips the host build
        (out_dir / "harness.cu").write_text(task.harness, encoding="utf-8")
        cmd = [nvcc, "-cubin", "-Xptxas", "-v", *flags, "harness.cu", "-o", "harness.cubin"]
    else:
        (out_dir / "kernel.cu").write_text('#include "kernel.cuh"\n', encoding="utf-8")
        cmd = [nvcc, "-cubin", "-Xptxas", "-v", *flags, "kernel.cu", "-o", "kernel.cubin"]
    start = time.monotonic()
    # nvcc on hostile code can explode in memory; 8 GB is far above any real kernel's need
    code, log = nvcc_parallel.run(cmd, out_dir, task.timeout, memory_gb=8, scratch=str(out_dir))
    if code == -9:
        return {"ok": False, "reason": "compile_timeout", "log": f"nvcc exceeded {task.timeout} s",
                "seconds": time.monotonic() - start}, False
    log = logs.scrub(log, [str(out_dir)], cap=20000)
    res = {"ok": code == 0, "reason": None if code == 0 else "compile_error",
           "log": log if code else "", "resources": parse_ptxas(log),
           "so": str(out_dir / "harness.so") if task.harness and link and code == 0 else None,
           "seconds": round(time.monotonic() - start, 3), "key": key}
    return res, True


# the first error nvcc's front end (`file(line): error`) or the host compiler (`file:line:col: error`) reports
ERROR_AT = re.compile(r"^(?P<file>[^\s:(][^:(\n]*?)(?:\((?P<line>\d+)\)|:(?P<line2>\d+)(?::\d+)?):\s*"
                      r"(?:catastrophic |fatal )?error\b:?\s*(?P<msg>[^\n]*)", re.M)
MISSING = re.compile(r'cannot open source file "([^"]+)"|^([^:\s]+): No such file or directory')


def blame(log: str, used: str, headers: dict) -> tuple[str, str]:
    """Whose failure a compile error is, and the error's line: `missing_header` (a header found
    neither in the record's tree, the toolkit nor the stand-ins), `toolchain` (an error inside the
    toolkit's or system's own headers, not reached from the record's code), `closure_error` (in a
    part of the record's headers that its code never uses: the extraction's fault), else
    `compile_error` (the kernel's)."""
    m = ERROR_AT.search(log)
    if not m:
        return "compile_error", ""
    file, line = m["file"], int(m["line"] or m["line2"])
    where = f"{file}({line}): {m['msg']}"[:300]
    if MISSING.search(m["msg"]):
        return "missing_header", where
    if file.startswith("/") and "instantiation of" not in log[m.end():m.end() + 2000]:
        return "toolchain", where
    from sftbuild.cuda_units import safe_rel, unused_at

    rel = safe_rel(file[len(TREE) + 1:]) if file.startswith(TREE + "/") else None
    if rel in headers:
        names = unused_at(headers, used, rel, line)
        if names:
            return "closure_error", f"{where} (in {names}, which the kernel never uses)"[:400]
    return "compile_error", where


TREE = "tree"  # the build folder's copy of a record's own headers
INCLUDE_ANY = re.compile(r'^[ \t]*#[ \t]*include(?:_next)?\b[ \t]*(?:([<"])([^>"\n]*)[>"]|([^\s/][^\n]*))', re.M)


def unsafe_include(code: str, headers: dict, dirs: list[str]) -> str | None:
    """Why an include of the record or of its headers could read outside its tree, or None.

    Each file's includes are resolved from its own folder and every include folder; a name
    that is absolute, escapes the tree through `..`, or is computed by a macro is refused."""
    from sftbuild.cuda_units import safe_rel

    bad_keys = [k for k in headers if safe_rel(k) != k or k == "."]
    if bad_keys or any(safe_rel(d) is None for d in dirs):
        return f"header path outside its tree: {(bad_keys or dirs)[0]!r}"
    own = (dirs or ["."])[0]
    for rel, text in [(f"{own}/kernel.cuh", code), *headers.items()]:
        here = rel.rsplit("/", 1)[0] if "/" in rel else "."
        for m in INCLUDE_ANY.finditer(strip_comments(text)):  # string literals kept: "/*" in one hides nothing
            if m.group(3) is not None:
                return f"{rel}: computed #include {m.group(3).strip()[:80]}"
            name = m.group(2).strip()
            if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
                return f"{rel}: absolute #include {name[:80]}"
            if ".." in name.replace("\\", "/").split("/"):
                if m.group(1) == '"' and safe_rel(f"{here}/{name}") in headers:
                    continue  # found beside the including file: the compiler looks no further
                bases = ([here] if m.group(1) == '"' else []) + list(dirs or ["."])
                if m.group(1) == "<" or any(safe_rel(f"{b}/{name}") is None for b in bases):
                    return f"{rel}: #include {name[:80]} leaves the tree"
    return None


# ---- Triton: ahead-of-time compile of each @triton.jit kernel -------------------

def cached_gate(task: CompileTask | dict, gate) -> dict:
    """`gate(task)`'s result for the module in `task`, kept under the compile cache by a hash of what
    it depends on (the code, the target, Triton's and the toolchain's versions, and this module, which
    holds the gate): processes that share a cache run the gate once per key, the others wait for it and
    read the result ("cached": True). Only a result that `gate` marks `keep` (the gate ran to its end)
    is kept; a timeout is retried."""
    task = CompileTask.of(task)

    def key(code: str) -> str:
        return hashlib.sha256(json.dumps(["triton-gate", code, task.arch, _triton_version(),
                                          nvcc_version(), _GATE_SOURCE]).encode()).hexdigest()[:24]

    def build():
        res = dict(gate(task))
        return res, res.pop("keep", False)

    # a module that passed, read by its code without comments: completions that differ only in them pass
    # alike (lines are kept, so are the figures); a failure's log quotes the code, so it is kept per text
    passed = Path(task.cache_dir) / "triton_gate_passed" / f"{key(uncommented(task.code))}.json"
    try:
        return {**json.loads(passed.read_text()), "cached": True}
    except (OSError, ValueError):
        pass
    res = once(Path(task.cache_dir) / "triton_gate" / key(task.code), build)
    if res.get("ok"):
        passed.parent.mkdir(parents=True, exist_ok=True)
        tmp = passed.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: v for k, v in res.items() if k != "cached"}))
        os.replace(tmp, passed)
    return res


def uncommented(code: str) -> str:
    """Python `code` with each comment blanked, line for line (what a compile never reads), and blank
    lines at its end dropped (no line number moves); `code` itself where it does not tokenize."""
    lines = code.splitlines(keepends=True)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                line = lines[tok.start[0] - 1]
                lines[tok.start[0] - 1] = line[:tok.start[1]].rstrip() + line[len(line.rstrip("\r\n")):]
    except (tokenize.TokenError, SyntaxError):
        return code
    return "".join(lines).rstrip() + "\n"


# a change to the gate's own code (how it reads signatures, which errors are genuine) is a new key
_GATE_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _triton_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def triton_gate(task: CompileTask | dict) -> dict:
    """Compile every @triton.jit kernel in a module to a cubin for the target, without a GPU.

    Argument types are not declared in Python, so the signature is read from the kernel:
    `tl.constexpr` parameters take the value the module passes at its launch site (else 128, or 4
    for one that bounds a `tl.static_range`, which the compiler unrolls),
    parameters used as load/store addresses are fp32 pointers, the rest i32. A kernel whose
    signature cannot be read this way is left to the GPU worker's JIT ("aot": "skipped").
    Runs in a sandbox process (see sftbuild.validate.pipeline.triton_gate): the module is parsed,
    never executed; each kernel's own definition is, without its decorators."""
    import ast

    start = time.monotonic()
    task = CompileTask.of(task)
    try:
        tree = ast.parse(task.code)
    except SyntaxError as e:
        return {"ok": False, "reason": "compile_error", "log": f"syntax error line {e.lineno}: {e.msg}"}
    launch_kw = launch_values(tree)
    kernels, aot = {}, {}
    for f in jit_functions(tree):
        try:
            kernels[f.name] = _triton_aot(task, f, launch_kw)
            aot[f.name] = "ok"
        except _Skip as e:
            aot[f.name] = f"skipped: {e}"[:300]
        except Exception as e:
            msg = str(e)
            if type(e).__name__ == "CompilationError" and GENUINE.search(msg) and not _module_name(msg, tree):
                return {"ok": False, "reason": "compile_error", "log": msg[-4000:], "aot": {f.name: "error"},
                        "seconds": round(time.monotonic() - start, 3), "cached": False}
            aot[f.name] = f"skipped: {type(e).__name__}: {msg[:300]}"
    worst = {k: max((v.get(k, 0) for v in kernels.values()), default=0)
             for k in ("registers", "smem", "stack", "spill_stores", "spill_loads")}
    return {"ok": True, "reason": None, "resources": {"kernels": kernels, **worst}, "aot": aot,
            "seconds": round(time.monotonic() - start, 3), "cached": False}


_WARM_KERNEL = """import triton
import triton.language as tl

@triton.jit
def sftbuild_warm(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
"""


def _warm_gate(task: CompileTask | dict) -> None:
    """Before the gate's kept process forks one process per module: Triton imported and its compiler
    loaded, by compiling a kernel of our own (a first compile costs half a second, later ones 50 ms)."""
    triton_gate(dataclasses.replace(CompileTask.of(task), code=_WARM_KERNEL))


triton_gate.prefork = _warm_gate


def launch_values(tree) -> dict:
    """Integer values the module passes by keyword at its calls, the first in source order for each
    name: a constant (`BLOCK=1024`), or a parameter of the calling function with a constant default
    (`BLOCK_N=block_n` in a function taking `block_n=32`)."""
    import ast

    def const(v):
        return v.value if isinstance(v, ast.Constant) and type(v.value) is int else None

    scope = {}  # each keyword's innermost enclosing function's int defaults (inner functions walk later)
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defaults = {p["name"]: p["default"] for p in params(f) if type(p["default"]) is int}
            scope.update({id(n): defaults for n in ast.walk(f) if isinstance(n, ast.keyword)})
    found = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.keyword) and n.arg:
            v = const(n.value)
            if v is None and isinstance(n.value, ast.Name):
                v = scope.get(id(n), {}).get(n.value.id)
            if v is not None:
                found.setdefault(n.arg, v)
    return found


def jit_functions(tree) -> list:
    """The module's top-level `@...jit` functions: the kernels the gate compiles."""
    import ast

    return [f for f in tree.body if isinstance(f, ast.FunctionDef) and any("jit" in ast.unparse(d)
                                                                             for d in f.decorator_list)]


# errors no choice of argument types explains: unknown names, a module's unknown attributes (a misspelt
# `tl.` function). "'dtype' object has no attribute 'element_ty'" or "'int' object has no attribute
# 'scalar'" says only that a guessed type was wrong: the GPU worker's JIT compiles such a kernel
GENUINE = re.compile(r"module '[\w.]+' has no attribute|is not defined|NameError|unsupported AST node|SyntaxError")


class _Skip(Exception):
    pass


def _module_name(msg: str, tree) -> bool:
    """The error names something the module defines or imports at top level (a helper, a constant):
    the gate compiles the kernel alone, so only the full module can tell; not a genuine error."""
    import ast

    m = re.search(r"(\w+)'? is not defined", msg)
    if not m:
        return False
    top, todo = set(), list(tree.body)
    while todo:  # module-level statements, those under a top-level try/if/with too (`try: _f = shim.f`)
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            top |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                top |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
        elif isinstance(n, (ast.Try, ast.If, ast.With)):
            todo += [*n.body, *getattr(n, "orelse", []), *getattr(n, "finalbody", []),
                     *(s for h in getattr(n, "handlers", []) for s in h.body)]
    return m.group(1) in top


def _triton_aot(task, f, launch_kw) -> dict:
    import ast
    import copy
    import textwrap
    import types

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    addr = set()
    for n in ast.walk(f):
        if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] in ("load", "store", "atomic_add"):
            if n.args:
                addr |= {x.id for x in ast.walk(n.args[0]) if isinstance(x, ast.Name)}
    # a parameter whose `.dtype.element_ty` the kernel reads is a pointer (FlagGems' `inp.dtype.element_ty`)
    addr |= {n.value.value.id for n in ast.walk(f) if isinstance(n, ast.Attribute) and n.attr == "element_ty"
             and isinstance(n.value, ast.Attribute) and n.value.attr == "dtype" and isinstance(n.value.value, ast.Name)}
    # a constexpr the kernel casts to (`y.to(OUT_DTYPE)`, `dtype=ACC`) is a dtype, not a size
    dtypes = {x.id for n in ast.walk(f) if isinstance(n, ast.Call)
              for x in ([n.args[0]] if ast.unparse(n.func).endswith(".to") and n.args else [])
              + [k.value for k in n.keywords if k.arg in ("dtype", "out_dtype")] if isinstance(x, ast.Name)}
    # names assigned locally are offsets, not parameters
    local = {t.id for n in ast.walk(f) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    # a constexpr that bounds a `tl.static_range` is a trip count the compiler unrolls: 128 copies of
    # a tile loop can take minutes to compile, where launches pass a handful (heads, streams)
    unrolled = {x.id for n in ast.walk(f) if isinstance(n, ast.Call)
                and ast.unparse(n.func).split(".")[-1] == "static_range"
                for x in ast.walk(n) if isinstance(x, ast.Name)}
    sig, consts = {}, {}
    for a in f.args.args:
        ann = ast.unparse(a.annotation) if a.annotation else ""
        if "constexpr" in ann:
            sig[a.arg] = "constexpr"
            guess = tl.float32 if a.arg in dtypes else UNROLLED_DEFAULT if a.arg in unrolled else 128
            consts[a.arg] = launch_kw.get(a.arg, guess)
        elif a.arg in addr and a.arg not in local or a.arg.endswith("ptr"):
            sig[a.arg] = "*fp32"
        else:
            sig[a.arg] = "i32"
    # exec only the kernel's own def, without its decorators (jit is applied here); this runs in a
    # sandbox process (sftbuild.validate.pipeline.triton_gate), as default values are evaluated
    bare = copy.copy(f)
    bare.decorator_list = []
    src = textwrap.dedent(ast.unparse(bare))
    mod = types.ModuleType("sftbuild_aot")
    mod.__dict__.update(triton=triton, tl=triton.language)
    path = Path(task.cache_dir) / "triton_aot" / f"{hashlib.sha256(src.encode()).hexdigest()[:16]}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import triton\nimport triton.language as tl\n" + src)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"sftbuild_aot_{path.stem}", path)
    m = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(m)
    except Exception as e:
        raise _Skip(f"kernel refers to module names: {e}") from e
    fn = triton.jit(getattr(m, f.name))
    major = int(task.arch.split("_")[-1][:-1] or 9)
    minor = int(task.arch.split("_")[-1][-1])
    ck = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v
                                                                    for k, v in consts.items()}),
                        target=GPUTarget("cuda", major * 10 + minor, 32))
    md = ck.metadata
    res = _cubin_resources(ck.asm.get("cubin"), task)
    return {**res, "smem": max(res.get("smem", 0), getattr(md, "shared", 0) or 0), "num_warps": getattr(md, "num_warps", 0)}


UNROLLED_DEFAULT = 4  # the gate's value for a static_range bound no launch site names

RES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)")


def _cubin_resources(cubin: bytes | None, task) -> dict:
    """Registers, stack and static shared memory of a cubin, from cuobjdump."""
    out = {"registers": 0, "stack": 0, "smem": 0, "spill_stores": 0, "spill_loads": 0}
    if not cubin:
        return out
    try:
        tool = Path(find_nvcc(task.nvcc)).parent / "cuobjdump"
        path = Path(task.cache_dir) / "triton_aot" / f"{hashlib.sha256(cubin).hexdigest()[:16]}.cubin"
        path.write_bytes(cubin)  # named by content: pool workers never share a file
        log = sandbox.run([str(tool), "-res-usage", str(path)], 30, ro=[str(path.parent)]).output
        m = RES.search(log)
        if m:
            out.update(registers=int(m.group(1)), stack=int(m.group(2)), smem=int(m.group(3)))
    except Exception:
        pass
    return out
