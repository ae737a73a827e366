"""torch_does_the_work: ModelNew.forward or a Triton wrapper computing with torch instead of its kernel.

A wrapper's early-return branch that launches none of its kernels is a fallback (`if not x.is_cuda:
return torch.nn.functional.one_hot(x)`): the run-time checks judge whether a call took it, since
every call must launch one of the candidate's own kernels there (triton_decoy).

Host-side bookkeeping beside the record's own kernels is not the work: reductions (`.sum()` of a
buffer of partial results the kernel wrote, a handful of elements), scans and sorts of indices (a
`cumsum` of segment lengths), in a Triton wrapper or a ModelNew.forward whose record launches its
kernels (Triton launches, or calls into its load_inline extension), and `torch.where` or `F.linear`
in a module that launches Triton kernels (a mask helper; the logits whose loss a fused
linear-cross-entropy's kernels take). Those calls are left to the
run-time checks, which measure the elements torch's ops touched and whose kernels took the GPU time
(sftbuild.trial.checks.library_kernels, own_kernels_ran). Only where it is certain does this rule
stop such a call: the op applied to one of the function's own arguments (the full input) in the
value it returns. So is a branch beside one that
launches the kernels (another activation, chosen by name), which launches none. A package's reference
function (`*_ref`, `naive_*`, `torch_*`, ...) that the record calls nowhere, or only where it falls
back, is not a wrapper at all.
"""
from __future__ import annotations

import ast
import re
import sys

from sftbuild.parsing import aliases
from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import called_names, dotted, full_name, is_jit, launched_name

# torch calls that compute (the op itself); allocation, shape and dtype calls are allowed
TORCH_COMPUTE = re.compile(
    r"^torch\.(?:nn\.functional\.\w+|matmul|mm|bmm|addmm|baddbmm|einsum|tensordot|conv\w*|linear|softmax|"
    r"log_softmax|relu|sigmoid|tanh|gelu|sum|mean|amax|amin|max|min|argmax|argmin|norm|layer_norm|group_norm|"
    r"batch_norm|instance_norm|cumsum|cumprod|prod|var|std|exp|log|sqrt|rsqrt|pow|matrix_power|cdist|"
    r"inner|outer|dot|mv|chain_matmul|addmv|addbmm|sort|topk|logsumexp|softmax|clamp|where|erf|abs|"
    r"ops\.aten\.(?!is_)\w+|_C\.\w+|special\.\w+|linalg\.\w+|fft\.\w+)$")  # aten's is_* are predicates
TENSOR_COMPUTE = {"matmul", "mm", "bmm", "addmm", "softmax", "log_softmax", "relu", "sigmoid", "tanh", "sum", "mean",
                  "amax", "norm", "cumsum", "logsumexp", "conv2d", "einsum", "exp", "var", "std", "prod"}
# host-side bookkeeping a Triton wrapper may do around its launches (the run-time checks judge it)
BOOKKEEPING = {"sum", "mean", "amax", "amin", "max", "min", "prod", "cumsum", "sort", "argsort", "topk", "norm",
               "count_nonzero", "any", "all", "clamp", "logsumexp"}  # logsumexp: of per-block partials
# torch calls beside a launching wrapper's own kernels that may be honest setup (a mask from `where`, the
# logits a fused linear-cross-entropy's kernels take the loss of): the run-time work check judges them
SETUP = {"where", "linear"}
# matmuls that may chain on what a launch wrote (a fused linear-cross-entropy's dx = dlogits @ W, where
# its kernels wrote dlogits in place): left to the run-time work check, never a matmul of inputs alone
CHAIN = {"mm", "matmul", "bmm", "addmm", "baddbmm"}
LIBRARIES = {"torch", "triton", "numpy", "np", "math", "einops", "functools", "typing", "itertools", "os", "sys"}
REFERENCE_NAME = re.compile(r"(^|_)(ref|reference|naive|torch)(_|$)", re.I)
NN_MODULES = re.compile(r"^torch\.nn\.(?!Module$|Parameter$|ParameterList$|ModuleList$|ModuleDict$|"
                        r"Identity$|Buffer$|init\.)\w+$")


@STATIC_CHECKS.register
class TorchDoesTheWork(StaticCheck):
    """ModelNew.forward or a Triton wrapper calling torch ops, nn layers or `@` to compute the result."""

    name = "torch_does_the_work"
    version = 3  # `where`, `linear` and a `logsumexp` of partials beside Triton launches are judged at run time
    order = 60
    languages = PYTHON

    def check(self, src):
        layers = _layers(src)
        jits = _jit_names(src)
        exts = _extensions(src)
        launching = _launching(src, jits) if jits else set()
        reaching = _reaching(src, launching) if launching else set()
        # what launches a kernel: the kernels and the functions that reach a launch (not the helpers a
        # launching function calls, whose leniency they share: a `*_torch_ref` it falls back to launches none)
        launches = jits | _reaching(src, _launching(src, jits, helpers=False)) if launching else set()
        fallbacks = {fn.name: _fallbacks(fn, launches) for fn in src.forward if fn.name in reaching}
        # a function called only where a wrapper falls back is the fallback's
        called = called_names(src.tree, set().union(*fallbacks.values())) if src.language == "triton" else set()
        for fn in src.forward:
            if src.language == "triton" and REFERENCE_NAME.search(fn.name) and fn.name not in called:
                continue  # the package's own reference, kept beside the wrapper: called only where it falls back
            lenient = bool(launching) or _launches_own(fn, jits, exts)
            deferred = fallbacks.get(fn.name, set())
            returned = {id(x) for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value for x in ast.walk(r.value)}
            args = {a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg != "self"}
            written = _launch_written(fn, launches | _package_calls(src), args) if launching else {}
            for n in ast.walk(fn):
                if id(n) in deferred:
                    continue
                if _chains_on(n, written):
                    continue
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                    yield self.found("cheat", f"`@` matmul in {fn.name} (line {n.lineno}): torch does the work")
                    return
                if not isinstance(n, ast.Call):
                    continue
                name = full_name(n.func, src.aliases)
                last = n.func.attr if isinstance(n.func, ast.Attribute) else name.rsplit(".", 1)[-1]
                if launching and last in SETUP and name.startswith("torch."):
                    continue
                if lenient and last in BOOKKEEPING and not name.startswith("torch.ops."):
                    if id(n) in returned and _on_argument(n, args):  # the op on the input makes the result
                        yield self.found("cheat", f"{name} of an input returned by {fn.name} (line {n.lineno}): "
                                                  "torch does the work")
                        return
                    continue
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


def _package_calls(src) -> set[str]:
    """Functions the module imports from its own package (a relative import, or another top-level
    package than torch, Triton and the usual libraries): launchers of the package's other modules."""
    out = set()
    for n in src.tree.body:
        if isinstance(n, ast.ImportFrom) and n.module != "__future__" and (
                n.level or (n.module or "").split(".")[0] not in LIBRARIES | set(sys.stdlib_module_names)):
            out |= {a.asname or a.name for a in n.names}
    return out


def _launch_written(fn, launchers: set[str], args: set[str]) -> dict[str, int]:
    """Local names (never `fn`'s own arguments) that hold what a launch in `fn` may have written, each
    with the first line from which it does: a local passed to or returned by a launch, and what is
    computed from one after that line."""
    events = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and launched_name(n) in launchers:
            events.append((n.lineno, 0, {x.id for a in [*n.args, *(k.value for k in n.keywords)]
                                         for x in ast.walk(a) if isinstance(x, ast.Name)}, set()))
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            launched = any(launched_name(c) in launchers for c in ast.walk(n.value))
            events.append((n.lineno, 1, {x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name)},
                           {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)} | ({"__launch__"} if launched
                                                                                          else set())))
    written: dict[str, int] = {}
    for line, kind, names, used in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 0 or "__launch__" in used or used & written.keys():
            for name in names - args:
                written.setdefault(name, line)
    return written


def _chains_on(node, written: dict[str, int]) -> bool:
    """A matmul (`torch.mm(...)`, `a @ b`) with an operand that holds what a launch wrote before it."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        operands = [node.left, node.right]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CHAIN:
        operands = [node.func.value, *node.args, *(k.value for k in node.keywords if k.arg != "out")]
    else:
        return False
    return any(isinstance(x, ast.Name) and written.get(x.id, node.lineno) < node.lineno
               for o in operands for x in ast.walk(o))


def _reaching(src, launching: set[str]) -> set[str]:
    """The module's functions from which a launch is reached through calls: the launching ones and
    their callers (a public entry that checks its inputs, then calls a `_launch_*` helper)."""
    calls = {f.name: called_names(f) for f in src.tree.body if isinstance(f, ast.FunctionDef)}
    out, grew = set(launching), True
    while grew:
        more = {name for name, callees in calls.items() if name not in out and callees & out}
        out |= more
        grew = bool(more)
    return out


def _fallbacks(fn, launchers: set[str]) -> set[int]:
    """ids of the nodes in `fn`'s early-return branches that launch none of `launchers`: a fallback to
    torch where the kernels do not apply (another device, a dtype they lack). Whether a call took one
    is for the run-time checks, which run every trial size: a call that launches none of the
    candidate's own kernels is a cheat there (triton_decoy)."""
    def launches(node) -> bool:
        return launched_name(node) in launchers

    out: set[int] = set()
    for n in ast.walk(fn):
        if not isinstance(n, ast.If):
            continue
        blocks = [[x for stmt in block for x in ast.walk(stmt)] for block in (n.body, n.orelse)]
        launching = [any(map(launches, inside)) for inside in blocks]
        for block, inside, launched, other in zip((n.body, n.orelse), blocks, launching, reversed(launching)):
            # an early return that launches nothing, or the branch beside one that launches (an
            # activation chosen by name: `if act == SILU: kernel(...) elif act == GELU: F.gelu(...)`)
            if block and not launched and (_ends(block) or other):
                out |= {id(x) for x in inside}
    return out


def _ends(block: list) -> bool:
    """The block leaves the function on every path: its last statement returns or raises, or is an
    `if` whose branches both do (`if out is None: return res` / `else: out.copy_(res); return out`)."""
    last = block[-1] if block else None
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _ends(last.body) and _ends(last.orelse)


def _layers(src) -> dict[str, str]:
    """self.<attr> = torch.nn.<Layer>(...) assignments in ModelNew."""
    out = {}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for a in ast.walk(node):
                if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call):
                    name = full_name(a.value.func, src.aliases)
                    if NN_MODULES.match(name):
                        for t in a.targets:
                            if isinstance(t, ast.Attribute) and dotted(t.value) == "self":
                                out[t.attr] = name
    return out


def _extensions(src) -> set[str]:
    """Names bound to a load_inline / load extension module (`_ext = load_inline(...)`)."""
    out = set()
    for n in ast.walk(src.tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            name = full_name(n.value.func, src.aliases)
            if name.endswith(("load_inline", "cpp_extension.load")):
                out |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return out


def _launches_own(fn, jits: set[str], exts: set[str]) -> bool:
    """`fn` launches one of the record's kernels: a Triton launch or a call into its extension."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and (launched_name(n) in jits or (
                isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id in exts)):
            return True
    return False


def _on_argument(call: ast.Call, args: set[str]) -> bool:
    """The call applies to one of `args`: `x.sum()` or `torch.sum(x)`."""
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id in args:
        return True
    return bool(call.args) and isinstance(call.args[0], ast.Name) and call.args[0].id in args


def _receiver_is_tensorish(node) -> bool:
    # `x.sum()` on a name or call result; skip modules like `np`/`math`
    return not (isinstance(node, ast.Name) and node.id in ("np", "numpy", "math", "tl", "triton"))


def _jit_names(src) -> set[str]:
    """The module's @jit kernels, and the names it imports that it launches as kernels (`name[grid](...)`):
    a package's launcher module often imports its kernels from a sibling module."""
    own = {f.name for f in src.tree.body if isinstance(f, ast.FunctionDef) and is_jit(f)}
    imported = {a.asname or a.name for n in ast.walk(src.tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    launched = {n.func.value.id for n in ast.walk(src.tree) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)}
    kernels = own | (imported & launched)
    return kernels | set(aliases(src.tree, kernels))  # `exp__kernel = exp_`, before a wrapper named exp_


def _launching(src, jits: set[str], helpers: bool = True) -> set[str]:
    """Functions that launch one of the module's jit kernels (`jits`), and (`helpers`) those they call."""
    funcs = {f.name: f for f in src.tree.body if isinstance(f, ast.FunctionDef) and not is_jit(f)}
    out = {name for name, f in funcs.items() if any(launched_name(n) in jits for n in ast.walk(f))}
    todo = list(out) if helpers else []
    while todo:  # helpers a launching function calls share its leniency
        more = (called_names(funcs[todo.pop()]) & funcs.keys()) - out
        out |= more
        todo += more
    return out
