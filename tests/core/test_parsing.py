"""The one parse: a CUDA text's kernel view is built once, and every reader of kernels reads it."""
from __future__ import annotations

from pathlib import Path

from sftbuild import parsing
from sftbuild.dedupe.filters import FILTERS
from sftbuild.dedupe.near import Doc
from sftbuild.describe import writes
from sftbuild.bind.binders import BINDERS
from sftbuild.record import Record
from sftbuild.validate.static import scan

CODE = """#include <cuda_fp16.h>
// __global__ void ghost(float* x) { }
/* a block comment: } */
__global__ void __launch_bounds__(256) gelu_kernel(float* __restrict__ y, const float* x, int n) {
    const char* note = "// not a comment";
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = 2.f * x[i]; }
}
__global__ void empty_kernel(int n);
__global__ void empty_kernel(int n) { return; }
void launch(float* y, const float* x, int n) { gelu_kernel<<<(n + 255) / 256, 256>>>(y, x, n); }
"""


def test_the_view_reads_kernels_parameters_launches_and_includes_without_comments():
    v = parsing.kernel_view(CODE)
    assert [k.name for k in v.kernels] == ["gelu_kernel", "empty_kernel"]  # a declaration is no definition
    scale = v.kernel("gelu_kernel")
    assert [(p["name"], p["ptr"], p["const"], p["kind"]) for p in scale.params] == [
        ("y", True, False, "ptr"), ("x", True, True, "ptr"), ("n", False, False, "int")]
    assert '"// not a comment"' in scale.body and "y[i] = 2.f * x[i];" in scale.body
    assert v.kernel("empty_kernel").body.strip() == "return;" and v.kernel("ghost") is None
    assert v.launches == ("gelu_kernel",) and v.includes == ("cuda_fp16.h",)
    assert "block comment" not in v.text and v.text.count("\n") == CODE.count("\n")
    assert parsing.kernel_view(CODE) is v


def test_every_reader_of_a_record_shares_one_view():
    parsing.kernel_view.cache_clear()
    rec = Record(language="cuda", code=CODE, source="test", entry={"kernels": ["gelu_kernel"], "params": [
        "float* __restrict__ y", "const float* x", "int n"]}, provenance={"path": "k.cu"})
    scan(rec.code, "cuda")  # static checks
    assert writes.roles("cuda", rec.code, "gelu_kernel", rec.entry["params"]) == (["x", "n"], ["y"])  # describe
    assert BINDERS.create("inferred").bind(rec) is None  # binders: neither tanh nor erf in its body
    doc = Doc(id="r", text=rec.code, language="cuda")
    assert FILTERS.create("too_simple").filter(doc) is True  # dedupe's filters
    info = parsing.kernel_view.cache_info()
    assert (info.misses, info.hits) == (1, 3)


def test_no_module_but_parsing_strips_comments_itself():
    root = Path(parsing.__file__).parent
    copies = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "parsing.py" and any(
        frag in p.read_text() for frag in ("/\\*.*?\\*/", "/\\*[\\s\\S]*?\\*/", '"//[^\\n]*', "'//[^\\n]*"))]
    assert copies == [], f"comment strippers outside sftbuild/parsing.py: {copies}"
