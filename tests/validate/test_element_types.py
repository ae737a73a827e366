"""A file-reference binding names the dtypes its launcher's arrays have as the file builds them."""
from sftbuild.trial.element_types import dtype_of

HEADER = """
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#elif defined(ENABLE_FP16)
typedef half floatX;
#else
typedef float floatX;
#endif
#if __CUDA_ARCH__ >= 800
typedef __nv_bfloat16 archX;
#endif
using realT = floatX;
"""


def test_the_files_own_define_selects_the_branch():
    assert dtype_of("floatX", ['#define ENABLE_BF16\n#include "common.h"', HEADER]) == "bfloat16"
    assert dtype_of("floatX", ['#define ENABLE_FP16\n#include "common.h"', HEADER]) == "float16"
    assert dtype_of("floatX", ['#include "common.h"', HEADER]) == "float32"
    assert dtype_of("realT", ['#define ENABLE_BF16\n', HEADER]) == "bfloat16"  # using, then typedef


def test_plain_types_and_undecidable_branches():
    assert dtype_of("float", []) == "float32" and dtype_of("half", []) == "float16"
    assert dtype_of("archX", [HEADER]) is None  # an architecture test decides it: no guess
    assert dtype_of("nowhere", [HEADER]) is None
    nested = "#ifndef ENABLE_BF16\n#ifdef USE_DOUBLE\ntypedef double T;\n#else\ntypedef float T;\n#endif\n#endif\n"
    assert dtype_of("T", ["#define USE_DOUBLE\n", nested]) == "float64"
    assert dtype_of("T", ["#define ENABLE_BF16\n", nested]) is None
