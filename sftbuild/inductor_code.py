"""Inductor output code made standalone: text in, text out; nothing here runs the code it reads.

Inductor writes, for one Dynamo graph, a module holding its kernels
(`name = async_compile.triton('name', '''source''', ...)`) and a host function
`call(args)` that takes the graph's placeholders in order and returns the graph's
outputs. Each placeholder has a Dynamo source: a Python expression over the
frame's locals `L`, e.g. `L['x']`, `L['x'].size()[0]`,
`L['self']._modules['ln']._parameters['weight']`.

- `kernels(code)`: the kernels, what they fuse ("Original ATen: [...]") and their launches.
- `strip(code)`: the output code without host paths and its benchmark/`__main__` blocks.
- `splice(code, name, source)`: the same code with one kernel's source replaced.
- `solution(program, code, sources, returns)`: a KernelBench solution module: the stripped
  output code plus `class ModelNew` with the program's `__init__` (same parameters and
  buffers, so seeding gives both models the same weights) and a `forward` that builds the
  args from the sources and returns `call(args)` shaped like the program's output.

- `hoist_sizes(program)`: the program with get_inputs' literal shape sizes made constants;
  `free_sizes(program)`: the constants only get_inputs reads (the candidates to vary).

`NotStandalone` says, in one sentence, why a program's output code cannot be made standalone.
"""
from __future__ import annotations

import ast
import copy
import re

PRIVATE_CALL = "_inductor_call"
ALLOWED_CALLS = {"size", "stride", "storage_offset", "numel", "dim"}


class NotStandalone(ValueError):
    """The output code or a placeholder source cannot be turned into a standalone module; `reason`
    is the harvest's skip reason."""

    def __init__(self, why: str, reason: str = "not_standalone"):
        super().__init__(why)
        self.reason = reason


def _triton_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "triton" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "async_compile" \
                and len(node.args) >= 2 and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                for a in node.args[:2]):
            yield node


ATEN = re.compile(r"^# (?:Topologically Sorted )?Source Nodes: \[([^\]]*)\], Original ATen: \[([^\]]*)\]", re.M)


def kernels(code: str) -> list[dict]:
    """Each kernel of the output code: name, source, the ATen ops and source nodes it fuses, and its
    launches in `call` (`kernel.run(...)`)."""
    tree = ast.parse(code)
    lines = code.splitlines()
    found: dict[str, dict] = {}
    for node in _triton_calls(tree):
        name = node.args[0].value
        aten, nodes = [], []
        for ln in reversed(lines[max(0, node.lineno - 60):node.lineno - 1]):  # the comment block above it
            m = ATEN.match(ln)
            if m:
                nodes = [s.strip() for s in m.group(1).split(",") if s.strip()]
                aten = [s.strip() for s in m.group(2).split(",") if s.strip()]
                break
            if ln.strip() and not ln.startswith("#"):
                break
        found[name] = {"name": name, "code": node.args[1].value, "aten": aten, "nodes": nodes, "launch_sites": []}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in found:
            found[node.func.value.id]["launch_sites"].append(
                {"function": "call", "line": node.lineno, "text": ast.unparse(node)[:500]})
    return list(found.values())


def extern_calls(code: str) -> list[str]:
    """Library calls the host code makes instead of generated kernels: `extern_kernels.mm`, ..., and
    the ATen ops it falls back to (`torch.ops.aten._trilinear.default`, which runs cuBLAS)."""
    return sorted(set(re.findall(r"\bextern_kernels\.(\w+)\(", code))
                  | set(re.findall(r"\btorch\.ops\.aten\.(\w+)\.\w+\(", code)))


_TAIL = re.compile(r"^(def get_args\(|def benchmark_compiled_module\(|if __name__ == ['\"]__main__['\"]:)")


def strip(code: str) -> str:
    """The output code without host paths (`# kernel path: ...` comments) and without the blocks
    that only benchmark it (`get_args`, `benchmark_compiled_module`, `if __name__ == "__main__"`)."""
    out, skipping = [], False
    for line in code.splitlines():
        if _TAIL.match(line):
            skipping = True
            continue
        if skipping and (not line.strip() or line[:1] in (" ", "\t")):
            continue
        skipping = False
        if line.startswith("# kernel path:") or line.startswith("# AOT ID:"):
            continue
        out.append(line)
    return "\n".join(out).rstrip() + "\n"


_CTYPES = re.compile(r"^from ctypes import [\w, ]+\n", re.M)
_SET_DEVICE = re.compile(r"^[ \t]+torch\.cuda\.set_device\(\d+\)\n", re.M)
_WAIT = re.compile(r"^async_compile\.wait\(globals\(\)\)$", re.M)


def host_code(code: str) -> str:
    """The stripped output code in the idioms the static checks accept: no unused ctypes import, no
    `torch.cuda.set_device` (the `_DeviceGuard` around it already selects the device), and the
    compiled kernels collected by name instead of through `globals()`."""
    code = strip(code)
    if not re.search(r"\bc_(?:void_p|long|int)\b", _CTYPES.sub("", code)):
        code = _CTYPES.sub("", code)
    code = _SET_DEVICE.sub("", code)
    tree = ast.parse(code)
    names = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Attribute) and isinstance(n.value.func.value, ast.Name)
             and n.value.func.value.id == "async_compile"]
    wait = "_compiled = {" + ", ".join(f"{n!r}: {n}" for n in names) + "}\nasync_compile.wait(_compiled)\n" + \
        "".join(f"{n} = _compiled[{n!r}]\n" for n in names)
    return _WAIT.sub(lambda m: wait.rstrip("\n"), code)


def _literal(src: str) -> str:
    if "'''" not in src and "\\" not in src and not src.endswith("'"):
        return "'''" + src + "'''"
    return repr(src)


def splice(code: str, name: str, source: str) -> str:
    """The output code with the source of kernel `name` replaced by `source`."""
    tree = ast.parse(code)
    hits = [n for n in _triton_calls(tree) if n.args[0].value == name]
    if not hits:
        raise NotStandalone(f"the output code defines no kernel {name!r}")
    lit = hits[0].args[1]
    lines = code.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    # ast offsets are in UTF-8 bytes within a line; the kernel sources here are ASCII, as Inductor writes them
    a = starts[lit.lineno - 1] + lit.col_offset
    b = starts[lit.end_lineno - 1] + lit.end_col_offset
    return code[:a] + _literal(source) + code[b:]


def check_source(expr: str) -> str:
    """A placeholder source the module can evaluate: subscripts, attributes and size/stride calls on
    `L` (the frame's locals); anything else (globals, closures) is not standalone."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        raise NotStandalone(f"placeholder source {expr!r} is not a Python expression")
    cur = node
    while True:
        if isinstance(cur, ast.Subscript):
            if not (isinstance(cur.slice, ast.Constant) and isinstance(cur.slice.value, (str, int))):
                raise NotStandalone(f"placeholder source {expr!r} indexes with an expression")
            cur = cur.value
        elif isinstance(cur, ast.Attribute):
            cur = cur.value
        elif isinstance(cur, ast.Call):
            if cur.args or cur.keywords or not (isinstance(cur.func, ast.Attribute)
                                                and cur.func.attr in ALLOWED_CALLS):
                raise NotStandalone(f"placeholder source {expr!r} calls something other than size/stride")
            cur = cur.func.value
        elif isinstance(cur, ast.Name):
            if cur.id != "L":
                raise NotStandalone(f"placeholder source {expr!r} reads {cur.id}, not the frame's locals")
            return expr
        else:
            raise NotStandalone(f"placeholder source {expr!r} is not a chain of lookups on the frame's locals")


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node):
        if node.id == "Model":
            node.id = "ModelNew"
        return node


def _forward_params(fwd: ast.FunctionDef) -> list[str]:
    a = fwd.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise NotStandalone("Model.forward takes *args, **kwargs or keyword-only arguments")
    return [p.arg for p in a.args]


def solution(program: str, code: str, sources: list[str], returns) -> str:
    """The solution module of one program: its output code made standalone and `class ModelNew`.

    `sources` are the graph's placeholder sources in order; `returns` is "tensor" when the program
    returns one tensor (`call` returns a 1-tuple), else the number of tensors it returns as a tuple."""
    for s in sources:
        check_source(s)
    tree = ast.parse(program)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise NotStandalone("the program defines no class Model")
    fwd = next((f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if fwd is None:
        raise NotStandalone("Model defines no forward")
    params = _forward_params(fwd)
    if not params or params[0] != "self":
        raise NotStandalone("Model.forward is not a method taking self")
    inputs = params[1:]
    keep = [n for n in tree.body if not (isinstance(n, (ast.FunctionDef, ast.ClassDef))
                                         and n.name in ("Model", "get_inputs", "get_init_inputs"))
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    body = [m for m in model.body if not (isinstance(m, ast.FunctionDef) and m.name == "forward")
            and not (isinstance(m, ast.Expr) and isinstance(m.value, ast.Constant))]
    cls = copy.deepcopy(model)
    cls.name, cls.body, cls.decorator_list = "ModelNew", body or [ast.Pass()], []
    cls = ast.fix_missing_locations(_Rename().visit(cls))
    sig = ", ".join(params)
    local = ", ".join([f"'self': self"] + [f"{p!r}: _dense({p})" for p in inputs])
    ret = "out[0]" if returns == "tensor" else "tuple(out)"
    cls_src = ast.unparse(cls)
    forward = (f"\n\n    def forward({sig}):\n"
               f"        L = {{{local}}}\n"
               f"        args = [{', '.join(sources)}]\n"
               f"        out = {PRIVATE_CALL}(args)\n"
               f"        return {ret}\n")
    prog = "\n".join(ast.unparse(n) for n in keep)
    return (host_code(code) + f"\n{PRIVATE_CALL} = call\n\n\n"
            "# ---- the program's module: ModelNew keeps its parameters and runs the code above ----\n"
            f"{prog}\n\n\n"
            "def _dense(v):\n"
            "    # the compiled code assumes the example's dense layout\n"
            "    return v.contiguous() if isinstance(v, torch.Tensor) else v\n\n\n"
            f"{cls_src}{forward}")


def free_sizes(program: str) -> list[str]:
    """Module-level integer size constants that only `get_inputs` reads: changing one changes input
    shapes alone, which the dynamic-shape output code takes as arguments. Constants that shape
    parameters (read by `Model` or `get_init_inputs`) are baked into the compiled code, and stay."""
    tree = ast.parse(program)
    consts = {n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
              and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)
              and type(n.value.value) is int}

    def names(node) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    used_by_inputs, used_elsewhere = set(), set()
    for n in tree.body:
        if isinstance(n, ast.FunctionDef) and n.name == "get_inputs":
            used_by_inputs |= names(n)
        elif not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                  and n.targets[0].id in consts):
            used_elsewhere |= names(n)
        else:
            used_elsewhere |= names(n.value)
    return sorted((consts & used_by_inputs) - used_elsewhere)


def kernel_names(code: str) -> list[str]:
    """Names of the kernels Inductor output code compiles (`async_compile.triton('name', ...)`),
    read from the text, so any code, even code that does not parse, has an answer."""
    return sorted(set(re.findall(r"\basync_compile\.triton\(\s*['\"](\w+)['\"]", code)))


FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "randint", "full"}


def _size_literals(call: ast.Call) -> list[ast.Constant]:
    """The int literals that give the shape in a tensor factory call (`torch.randn(4096, 1024)`,
    `torch.randint(0, 10, (64,))`, `torch.full((8, 8), 0.5)`)."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name not in FACTORIES:
        return []
    if name == "randint":
        shape = [k.value for k in call.keywords if k.arg == "size"] or call.args[-1:]
    elif name == "full":
        shape = [k.value for k in call.keywords if k.arg == "size"] or call.args[:1]
    else:
        shape = [k.value for k in call.keywords if k.arg == "size"] or call.args
    out = []
    for a in shape:
        for e in (a.elts if isinstance(a, (ast.Tuple, ast.List)) else [a]):
            if isinstance(e, ast.Constant) and type(e.value) is int and e.value > 1:
                out.append(e)
    return out


def hoist_sizes(program: str) -> str:
    """The program with the literal input sizes of `get_inputs` (shape arguments of tensor factory
    calls) made module-level constants (`size_0 = 4096`), so the validator can vary them as it varies
    a KernelBench program's size constants. A value written anywhere else in the program (a layer's
    width, a view's shape, another constant) is left alone: changing it alone would break the program.
    Same values, same constant; the program computes exactly what it did."""
    tree = ast.parse(program)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return program
    sizes = [c for n in ast.walk(fn) if isinstance(n, ast.Call) for c in _size_literals(n)]
    in_sizes = {id(c) for c in sizes}
    other = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int
             and id(n) not in in_sizes}
    sizes = [c for c in sizes if c.value not in other]
    if not sizes:
        return program
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names: dict[int, str] = {}
    k = 0
    for c in sizes:
        if c.value not in names:
            while f"size_{k}" in taken:
                k += 1
            names[c.value] = f"size_{k}"
            k += 1
    lines = program.splitlines(keepends=True)
    for c in sorted(sizes, key=lambda c: (c.lineno, c.col_offset), reverse=True):
        ln = lines[c.lineno - 1]
        lines[c.lineno - 1] = ln[:c.col_offset] + names[c.value] + ln[c.end_col_offset:]
    start = fn.lineno - 1 - len(fn.decorator_list)
    block = "".join(f"{n} = {v}\n" for v, n in names.items()) + "\n\n"
    return "".join(lines[:start]) + block + "".join(lines[start:])


def call_arity(code: str) -> int | None:
    """How many arguments the output code's `call(args)` unpacks (`arg0_1, arg1_1 = args`); None when
    the code has no such call."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            for st in node.body:
                if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and st.value.id == "args":
                    t = st.targets[0]
                    return len(t.elts) if isinstance(t, ast.Tuple) else 1
            return 0
    return None


def pick_code(codes: list[str], n_args: int) -> str | None:
    """The output module of a one-graph program among what was captured (autotuning may capture
    benchmark modules beside it): the last whose `call` takes the graph's `n_args` placeholders."""
    fits = [c for c in codes if call_arity(c) == n_args]
    return fits[-1] if fits else None
