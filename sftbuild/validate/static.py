"""Static checks: read the code, never run it.

Each check is a tiny plug-in: a `name`, the languages it reads, and one
`check(src)` method yielding findings. A finding is (reason, detail) where
reason is `cheat`, `forbidden_call` or `bad_launch`. `scan(code, language)`
runs every registered check and returns the findings; the first one decides
the verdict.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Iterator

CHECKS: list["Check"] = []


@dataclasses.dataclass
class Finding:
    reason: str  # cheat | forbidden_call | bad_launch
    check: str
    detail: str


class Source:
    """The code split into what checks read: Python AST, Python source, CUDA C++ (comments stripped)."""

    def __init__(self, code: str, language: str, budget: dict | None = None):
        self.code, self.language = code, language
        self.budget = {"max_block_size": 1024, "shared_memory_budget": 232448, **(budget or {})}
        self.tree: ast.AST | None = None
        self.syntax_error = ""
        if language in ("triton", "kernelbench"):
            try:
                self.tree = ast.parse(code)
            except SyntaxError as e:
                self.syntax_error = f"line {e.lineno}: {e.msg}"

    @functools.cached_property
    def cuda(self) -> str:
        """CUDA C++ text: the code itself, or the string constants of a Python module (load_inline sources)."""
        if self.language == "cuda":
            return strip_comments(self.code)
        if self.tree is None:
            return ""
        parts = [n.value for n in ast.walk(self.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and ("__global__" in n.value or "#include" in n.value or "torch::" in n.value)]
        return strip_comments("\n".join(parts))

    @functools.cached_property
    def forward(self) -> list[ast.AST]:
        """Bodies of ModelNew.forward (KernelBench) or of the non-jit functions (Triton wrappers)."""
        if self.tree is None:
            return []
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
                out += [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"]
        if self.language == "triton" and not out:
            out = [f for f in self.tree.body if isinstance(f, ast.FunctionDef) and not _is_jit(f)]
        return out


class Check:
    name = "check"
    languages: tuple[str, ...] = ("cuda", "triton", "kernelbench")

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not cls.__name__.startswith("_"):  # underscored classes are shared bases, not checks
            CHECKS.append(cls())

    def check(self, src: Source) -> Iterator[Finding]:
        raise NotImplementedError

    def found(self, reason: str, detail: str) -> Finding:
        return Finding(reason, self.name, detail)


def scan(code: str, language: str, budget: dict | None = None) -> list[Finding]:
    src = Source(code, language, budget)
    if src.syntax_error:
        return [Finding("compile_error", "parse", f"Python syntax error, {src.syntax_error}")]
    return [f for c in CHECKS if language in c.languages for f in c.check(src)]


# ---- helpers ------------------------------------------------------------------

def strip_comments(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r"//[^\n]*", "", code)


def dotted(node: ast.AST) -> str:
    """`torch.nn.functional.relu` for an attribute chain, '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_jit(f: ast.FunctionDef) -> bool:
    return any("jit" in dotted(d.func if isinstance(d, ast.Call) else d) or
               "autotune" in dotted(d.func if isinstance(d, ast.Call) else d) for d in f.decorator_list)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Import aliases, so `import torch.nn.functional as F` makes `F.relu` read as the full name."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def full_name(node: ast.AST, aliases: dict[str, str]) -> str:
    name = dotted(node)
    head, _, rest = name.partition(".")
    if head in aliases:
        return aliases[head] + ("." + rest if rest else "")
    return name


def const_int(expr: str, defines: dict[str, int]) -> int | None:
    """Evaluate a small integer expression of literals and known macros; None when unknown."""
    expr = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr.strip())
    expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(defines[m.group(0)]) if m.group(0) in defines else m.group(0), expr)
    if not re.fullmatch(r"[\d\s+\-*/()<>]+", expr):
        return None
    try:
        return int(eval(expr.replace("/", "//"), {"__builtins__": {}}))  # digits and operators only
    except Exception:
        return None


def defines(code: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in re.finditer(r"(?:#define\s+(\w+)\s+([^\n]+)|(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+)?"
                         r"(?:int|long|size_t|int64_t|int32_t|unsigned)\s+(\w+)\s*=\s*([^;]+);)", code):
        name, val = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        v = const_int(val, out)
        if v is not None:
            out[name] = v
    return out


# ---- CUDA C++ host code --------------------------------------------------------

HOST_FORBIDDEN = {
    r"\bcudaDeviceReset\s*\(": "cudaDeviceReset resets the context under the harness",
    r"(?<![\w.:])(?:std::)?(?:exit|_exit|abort|quick_exit)\s*\(": "exits the process",
    r"(?<![\w.:])(?:std::)?system\s*\(": "runs a shell command",
    r"\b(?:fork|vfork|execv\w*|execl\w*|popen)\s*\(": "starts a process",
    r"\bstd::(?:thread|async|jthread)\b|\bpthread_create\s*\(": "spawns a thread to hide work",
    r"\bcudaStreamCreate\w*\s*\(|\bcuStreamCreate\w*\s*\(": "creates its own stream to hide work from the timer",
    r"\bcudaSetDevice\s*\(|\bcudaDeviceSetLimit\s*\(": "changes device state",
    r"\bdlopen\s*\(|\bcuLaunchKernel\s*\(": "loads or launches code the checks cannot see",
}
# at::/torch:: names that allocate or describe tensors; anything else is torch doing the work
TORCH_ALLOWED = {
    "Tensor", "TensorOptions", "ScalarType", "Device", "DeviceType", "IntArrayRef", "Scalar", "empty",
    "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "kFloat",
    "kFloat32", "kFloat16", "kHalf", "kBFloat16", "kFloat64", "kDouble", "kInt", "kInt32", "kInt64", "kLong",
    "kCUDA", "kCPU", "kByte", "kBool", "Half", "BFloat16", "cuda", "dtype", "device", "TensorAccessor",
    "PackedTensorAccessor32", "PackedTensorAccessor64", "RestrictPtrTraits", "DefaultPtrTraits", "detail",
    "OptionalCUDAGuard", "CUDAGuard", "getCurrentCUDAStream", "check", "native", "ArrayRef", "optional",
    "nullopt", "MemoryFormat", "Layout", "kStrided", "TensorArg", "checkAllSameGPU", "acc_type", "opmath_type",
    "numeric_limits", "elementSize", "toString", "Generator", "List", "IValue", "TensorList", "autograd",
    "NoGradGuard", "AutoDispatchBelowADInplaceOrView", "randn", "rand", "arange",
}
TENSOR_METHOD_CHEATS = r"\.\s*(?:matmul|mm|bmm|addmm|baddbmm|conv\w*|softmax|log_softmax|relu|gelu|sigmoid|tanh|" \
                       r"sum|mean|max|min|norm|layer_norm|linear|einsum|cumsum|prod|var|std|exp|argmax|argmin|" \
                       r"sort|topk|pow|sqrt)\s*\("


class HostCalls(Check):
    """Process, thread and stream calls in CUDA host code."""

    name = "host_calls"

    def check(self, src):
        for pat, why in HOST_FORBIDDEN.items():
            m = re.search(pat, src.cuda)
            if m:
                yield self.found("forbidden_call", f"{m.group(0).strip()}: {why}")


class TorchInHost(Check):
    """ATen ops, cuBLAS or cuDNN doing the work inside the CUDA host code."""

    name = "torch_in_host"

    def check(self, src):
        code = src.cuda
        # device code may call at:: device helpers (at::_isnan); only host code can hand work to torch
        for m in re.finditer(r"\b(?:at|torch)::((?:\w+::)*)(\w+)\s*\(", _host_only(code)):
            ns, fn = m.group(1), m.group(2)
            if fn not in TORCH_ALLOWED and not any(p.rstrip(":") in TORCH_ALLOWED for p in ns.split("::") if p):
                yield self.found("cheat", f"{m.group(0).rstrip('(')}: torch computes the result, not the kernel")
                return
        m = re.search(r"\b(cublas\w+|cublasLt\w+|cudnn\w+|cutlass::gemm)\b", code)
        if m:
            yield self.found("cheat", f"{m.group(1)}: a library computes the result, not the kernel")
            return
        if src.language == "kernelbench" or "torch::Tensor" in code or "at::Tensor" in code:
            m = re.search(TENSOR_METHOD_CHEATS, _host_only(code))
            if m:
                yield self.found("cheat", f"tensor method {m.group(0).strip(' .(')} in host code: torch does the work")


def _host_only(code: str) -> str:
    """Drop __global__/__device__ function bodies, whose `.x` etc. are not tensor methods."""
    out, i = [], 0
    for m in re.finditer(r"__(?:global|device)__[^{;]*\{", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j
    out.append(code[i:])
    return "".join(out)


class LaunchShape(Check):
    """Declared block sizes: a multiple of 32 (whole warps) and at most the device limit."""

    name = "launch_shape"

    def check(self, src):
        code = src.cuda
        if not code:
            return
        known = defines(code)
        limit = src.budget["max_block_size"]
        sizes = []
        for m in re.finditer(r"<<<\s*([^,>]+?)\s*,\s*([^,>]+?)\s*(?:,[^>]*)?>>>", code):
            sizes.append(("launch", m.group(2)))
        for m in re.finditer(r"__launch_bounds__\s*\(\s*([^,)]+)", code):
            sizes.append(("__launch_bounds__", m.group(1)))
        for m in re.finditer(r"dim3\s+\w*[Bb]lock\w*\s*[({]\s*([^,)}]+)(?:,\s*([^,)}]+))?(?:,\s*([^,)}]+))?", code):
            dims = [const_int(g, known) for g in m.groups() if g]
            if dims and all(d is not None for d in dims):
                n = 1
                for d in dims:
                    n *= d
                sizes.append(("dim3 block", str(n)))
        for where, expr in sizes:
            n = const_int(expr, known)
            if n is None:
                continue
            if n > limit or n <= 0:
                yield self.found("bad_launch", f"{where} block size {n} is over the limit of {limit} threads")
            elif n % 32:
                yield self.found("bad_launch", f"{where} block size {n} is not a multiple of 32 (a partial warp)")


DTYPE_BYTES = {"float": 4, "int": 4, "unsigned": 4, "uint32_t": 4, "int32_t": 4, "double": 8, "int64_t": 8,
               "long": 8, "half": 2, "__half": 2, "__nv_bfloat16": 2, "char": 1, "int8_t": 1, "uint8_t": 1,
               "float2": 8, "float4": 16, "half2": 4, "__half2": 4, "short": 2, "bool": 1, "size_t": 8}


class SharedBudget(Check):
    """Static __shared__ arrays must fit the per-block shared memory budget."""

    name = "shared_budget"

    def check(self, src):
        code = src.cuda
        if not code:
            return
        known = defines(code)
        total = 0
        for m in re.finditer(r"__shared__\s+(?:__align__\(\d+\)\s+)?(?:volatile\s+)?(\w+)\s+\w+((?:\s*\[[^\]]+\])+)",
                             code):
            size = DTYPE_BYTES.get(m.group(1), 4)
            for dim in re.findall(r"\[([^\]]+)\]", m.group(2)):
                d = const_int(dim, known)
                if d is None:
                    size = 0
                    break
                size *= d
            total += size
        if total > src.budget["shared_memory_budget"]:
            yield self.found("bad_launch", f"static shared memory {total} bytes over the budget of "
                             f"{src.budget['shared_memory_budget']}")


# ---- Python (Triton wrappers and KernelBench ModelNew) -------------------------

PY_FORBIDDEN = {
    "os.system": "runs a shell command", "os.popen": "runs a shell command", "os.fork": "starts a process",
    "os.exec": "replaces the process", "os.spawn": "starts a process", "os._exit": "exits the process",
    "os.kill": "signals a process", "sys.exit": "exits the process", "exit": "exits the process",
    "quit": "exits the process", "subprocess": "starts a process", "multiprocessing": "starts processes",
    "threading": "spawns a thread to hide work", "concurrent.futures": "spawns workers to hide work",
    "torch.cuda.Stream": "creates its own stream to hide work from the timer",
    "torch.cuda.stream": "switches streams to hide work from the timer",
    "torch.cuda.set_device": "changes device state", "ctypes": "calls native code the checks cannot see",
    "signal": "installs signal handlers", "socket": "opens a network connection",
    "torch.cuda.synchronize_hook": "hooks the runtime",
}
# torch calls that compute (the op itself); allocation, shape and dtype calls are allowed
TORCH_COMPUTE = re.compile(
    r"^torch\.(?:nn\.functional\.\w+|matmul|mm|bmm|addmm|baddbmm|einsum|tensordot|conv\w*|linear|softmax|"
    r"log_softmax|relu|sigmoid|tanh|gelu|sum|mean|amax|amin|max|min|argmax|argmin|norm|layer_norm|group_norm|"
    r"batch_norm|instance_norm|cumsum|cumprod|prod|var|std|exp|log|sqrt|rsqrt|pow|matrix_power|cdist|"
    r"inner|outer|dot|mv|chain_matmul|addmv|addbmm|sort|topk|logsumexp|softmax|clamp|where|erf|abs|"
    r"ops\.aten\.\w+|_C\.\w+|special\.\w+|linalg\.\w+|fft\.\w+)$")
TENSOR_COMPUTE = {"matmul", "mm", "bmm", "addmm", "softmax", "log_softmax", "relu", "sigmoid", "tanh", "sum", "mean",
                  "amax", "norm", "cumsum", "logsumexp", "conv2d", "einsum", "exp", "var", "std", "prod"}
NN_MODULES = re.compile(r"^torch\.nn\.(?!Module$|Parameter$|ParameterList$|ModuleList$|ModuleDict$|"
                        r"Identity$|Buffer$|init\.)\w+$")
DISGUISE = {"getattr": "looks a function up by name", "eval": "evaluates code", "exec": "executes code",
            "__import__": "imports by name", "importlib.import_module": "imports by name",
            "compile": "compiles code at run time", "globals": "reaches module state by name",
            "vars": "reaches module state by name", "setattr": "sets an attribute by name"}
PRECISION = ("allow_tf32", "set_float32_matmul_precision", "allow_fp16_reduced_precision_reduction",
             "allow_bf16_reduced_precision_reduction", "fp32_precision", "autocast")


class _PyCheck(Check):
    languages = ("triton", "kernelbench")

    def calls(self, src, nodes=None):
        """(full dotted name, node) of every call and attribute use under `nodes` (default: the module)."""
        aliases = _aliases(src.tree)
        for root in nodes if nodes is not None else [src.tree]:
            for n in ast.walk(root):
                if isinstance(n, ast.Call):
                    yield full_name(n.func, aliases), n


class PythonForbidden(_PyCheck):
    """Processes, threads, streams, exits and native calls anywhere in the module."""

    name = "python_forbidden"

    def check(self, src):
        aliases = _aliases(src.tree)
        for n in ast.walk(src.tree):
            names = []
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            elif isinstance(n, (ast.Call, ast.Attribute)):
                names = [full_name(n.func if isinstance(n, ast.Call) else n, aliases)]
            for name in names:
                for bad, why in PY_FORBIDDEN.items():
                    if name == bad or name.startswith(bad + ".") or (bad.endswith(("exec", "spawn"))
                                                                    and name.startswith(bad)):
                        yield self.found("forbidden_call", f"{name}: {why} (line {n.lineno})")
                        return


class TorchDoesTheWork(_PyCheck):
    """ModelNew.forward or a Triton wrapper calling torch ops, nn layers or `@` to compute the result."""

    name = "torch_does_the_work"

    def check(self, src):
        aliases = _aliases(src.tree)
        layers = self._layers(src, aliases)
        for fn in src.forward:
            for n in ast.walk(fn):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                    yield self.found("cheat", f"`@` matmul in {fn.name} (line {n.lineno}): torch does the work")
                    return
                if not isinstance(n, ast.Call):
                    continue
                name = full_name(n.func, aliases)
                if TORCH_COMPUTE.match(name):
                    yield self.found("cheat", f"{name} in {fn.name} (line {n.lineno}): torch does the work")
                    return
                if isinstance(n.func, ast.Attribute) and n.func.attr in TENSOR_COMPUTE and \
                        not name.startswith(("tl.", "triton.")) and _receiver_is_tensorish(n.func.value):
                    yield self.found("cheat", f".{n.func.attr}() in {fn.name} (line {n.lineno}): torch does the work")
                    return
                if name.startswith("self.") and name.split(".")[1] in layers and len(name.split(".")) == 2:
                    yield self.found("cheat", f"{name} is a torch layer ({layers[name.split('.')[1]]}) called in "
                                     f"{fn.name}: torch does the work")
                    return

    def _layers(self, src, aliases) -> dict[str, str]:
        """self.<attr> = torch.nn.<Layer>(...) assignments in ModelNew."""
        out = {}
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
                for a in ast.walk(node):
                    if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call):
                        name = full_name(a.value.func, aliases)
                        if NN_MODULES.match(name):
                            for t in a.targets:
                                if isinstance(t, ast.Attribute) and dotted(t.value) == "self":
                                    out[t.attr] = name
        return out


def _receiver_is_tensorish(node) -> bool:
    # `x.sum()` on a name or call result; skip modules like `np`/`math`
    return not (isinstance(node, ast.Name) and node.id in ("np", "numpy", "math", "tl", "triton"))


class Disguise(_PyCheck):
    """Name-based lookups that hide which function is really called."""

    name = "disguise"

    def check(self, src):
        for name, n in self.calls(src):
            if name in DISGUISE:
                yield self.found("cheat", f"{name}() {DISGUISE[name]} (line {n.lineno}): torch called in disguise?")
                return


class PrecisionFlags(_PyCheck):
    """Turning on TF32 or reduced-precision reductions lowers an fp32 op's precision."""

    name = "precision_flags"

    def check(self, src):
        aliases = _aliases(src.tree)
        for n in ast.walk(src.tree):
            name = full_name(n, aliases) if isinstance(n, ast.Attribute) else ""
            if isinstance(n, ast.Call):
                name = full_name(n.func, aliases)
            if any(p in name for p in PRECISION):
                yield self.found("cheat", f"{name} (line {n.lineno}): lowers the precision of the fp32 policy")
                return


class TritonLaunch(_PyCheck):
    """Triton num_warps must give a block of at most the device limit."""

    name = "triton_launch"

    def check(self, src):
        for n in ast.walk(src.tree):
            if isinstance(n, ast.keyword) and n.arg == "num_warps" and isinstance(n.value, ast.Constant) \
                    and isinstance(n.value.value, int):
                w = n.value.value
                if w <= 0 or w * 32 > src.budget["max_block_size"] or w & (w - 1):
                    yield self.found("bad_launch", f"num_warps={w}: {w * 32} threads per block is not a "
                                     f"power-of-two number of warps within {src.budget['max_block_size']}")
                    return
