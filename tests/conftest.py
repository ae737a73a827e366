"""The shared test fixtures and marks, for every folder under tests/.

Folders: one per stage (harvest/, bind/, describe/, validate/, dedupe/) and core/ (store, config, CLI,
executors, op registry, `sftbuild run` end to end); beside them data/ (checked-in inputs),
redteam/ (the red-team cases), sandbox/ (fault injection: hostile code against the sandbox) and tasks.py (task functions that executor workers import by name).

Marks (declared in pyproject.toml):
  gpu      needs a CUDA GPU        skipped here without one
  nvcc     needs the CUDA compiler skipped here without one
  slow     cannot be made fast     tens of seconds each; a plain `pytest` runs them (among the first,
                                   LONGEST_FIRST), `pytest -m "not slow"` leaves them out
  sweep    exhaustive builds       every ATen kernel, harness and red-team extension against torch's
                                   headers, and the default `sftbuild run`: left out of a plain
                                   `pytest`, where tests beside them check the same on
                                   representatives; .ci/gpu-tests runs them on the GPU host
  network  downloads a package     skips itself when the download fails

Fixtures:
  make_ctx        a factory of stage contexts on fresh workspaces under tmp_path; closes them after
  ctx             make_ctx() with the defaults: the stage context most tests want
  compile_cache   one compile cache for the whole run, shared by xdist workers (autouse): results are
                  keyed by content, so a kernel that several tests build is compiled once; the validate
                  stage, in this process and in CLI subprocesses, finds it through SFTBUILD_COMPILE_CACHE.
                  Each run starts cold, unless SFTBUILD_COMPILE_CACHE is set by hand to a folder to keep
  aten_workspace  a workspace after harvesting the default source (torch's ATen headers), made once a
                  run; read it, or copy it before writing
  aten_copy       a private copy of aten_workspace under tmp_path, to run later stages on
"""
from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

import pytest

from sftbuild.config import Config
from sftbuild.context import Context, NvccMissing, find_nvcc
from sftbuild.executor import LocalExecutor
from sftbuild.sandbox import inductor_cache
from sftbuild.store import Store

# tests/tasks.py holds task functions that sandboxed workers import by name: the sandbox binds (and
# passes on) PYTHONPATH, so the repository root goes there, wherever the checkout lives (/tmp included)
ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

# Under xdist the worker processes already fill the cores: one torch thread each, in them and in every
# process they start (sandboxes pass OMP_NUM_THREADS on). torch's default of a thread per core in each
# oversubscribes the cores, and idle OpenMP threads spin: the same tensor work cost several times the CPU
# time on the shared 2-core machine. A run with -n 0 keeps torch's default. torch reads the variable
# when first imported, which this file leaves to the tests that use it (importing it costs seconds).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# Inductor output code that a test runs in this process (as a GPU worker would) finds the kernels the
# harvest's compile sandboxes built, in the cache they share (sftbuild.sandbox.inductor_cache)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache())


def _has_nvcc() -> bool:
    try:
        find_nvcc()
    except NvccMissing:
        return False
    return True


@functools.cache
def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def __getattr__(name: str):
    """`HAS_GPU`, asked for by tests that import torch anyway: a collection without them skips it."""
    if name == "HAS_GPU":
        return has_gpu()
    raise AttributeError(name)


HAS_NVCC = _has_nvcc()


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core (pyproject caps it at 4). The tests' sandboxed processes and
    compilers keep the cores busy already: on 2 cores a third worker cost about 9% more CPU time and
    ended the suite later (measured back to back: 707 against 645 CPU-s, 370 against 353 s)."""
    return os.cpu_count() or 1


# The files that take longest (tens of seconds on 2 cores) run first: xdist hands out whole files in
# collection order (pyproject: --dist loadfile --no-loadscope-reorder), so these start at once on
# different workers and the short files fill in around them, rather than one of them running alone
# at the end. Longest first; a file not named keeps its place after them.
LONGEST_FIRST = (
    "core/test_crash_resume.py",
    "validate/test_harness_ops.py",
    "validate/test_validate_redteam.py",
    "validate/test_validate_isolation.py",
    "bind/test_backward_probe.py",
    "validate/test_validate_extension.py",
    "validate/test_reward.py",
    "validate/test_probe.py",
    "validate/test_validate_foundation.py",
    "core/test_e2e.py",
    "harvest/test_triton_entry_points.py",
    "core/test_fuzz.py",
    "harvest/test_inductor_pairs.py",
    "harvest/test_launched_elsewhere.py",
    "harvest/test_harvest_extract.py",
)


# The quick tier, `pytest --quick -n 0`: every stage's cheap tests, for the edit-test loop (under a minute
# on 2 cores, in one process: workers would each pay the imports again); the full suite stays the CI gate. Files not named here are not even collected (their imports
# cost seconds); after a file, the tests of it left out (each seconds long). Slow and sweep tests never run.
QUICK = {
    "core/test_config.py": (), "core/test_store.py": (), "core/test_plugin_contract.py": (),
    "core/test_stage_keys.py": (), "core/test_parsing.py": (), "core/test_architecture.py": (),
    "core/test_blockers.py": (), "core/test_trial_types.py": (), "core/test_cli.py": ("test_review_gate_blocks_export_until_every_verdict",),
    "harvest/test_harvest_sources.py": ("test_kill9_then_rerun_gives_same_records",
                                        "test_datasets_kernelbook_and_ai_cuda_engineer"),
    "harvest/test_harvest_plugins.py": (), "harvest/test_harvest_license.py": (), "harvest/test_harvest_dsl.py": (),
    "bind/test_binders.py": (),
    "bind/test_registrations.py": ("test_aten_names_map_to_the_ops_that_compute_them",
                                   "test_probe_binds_the_registered_op",
                                   "test_the_registered_op_comes_first_where_the_name_says_nothing"),
    "describe/test_describe.py": (), "output/test_instructions.py": (),
    "validate/test_validate_static.py": (), "validate/test_validate_checks.py": (),
    "validate/test_validate_clusters.py": (),
    "validate/test_trial_loop.py": ("test_the_file_reference_path_runs_in_the_loop",
                                    "test_a_result_cached_by_pointer_is_the_same_cheat_in_every_path",
                                    "test_a_file_reference_constant_in_every_trial_is_uninformative"),
    "dedupe/test_dedupe_filters.py": (),
    "dedupe/test_dedupe.py": ("test_benchmark_dataset_file", "test_affine32_is_bit_identical_to_datasketch"),
    "review/test_sample.py": ("test_the_bound_is_scipys_beta_quantile",), "review/test_packets.py": (),
    "review/test_flow.py": ("test_terminal_flow_reviews_200_items_by_keystrokes_alone",),
    "output/test_output_exporters.py": (),
}
TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="the quick tier: every stage's cheap tests, under a minute (tests/conftest.py QUICK)")


def pytest_ignore_collect(collection_path, config):
    if config.getoption("quick") and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return collection_path.relative_to(TESTS).as_posix() not in QUICK or None
    return None


def _quick(items: list, config) -> list:
    """The items of the quick tier; the rest are reported deselected."""
    keep, drop = [], []
    for item in items:
        path, _, name = item.nodeid.partition("::")
        left_out = QUICK.get(path.removeprefix("tests/"), ())
        slow = "slow" in item.keywords or "sweep" in item.keywords
        (drop if slow or name.split("[")[0] in left_out else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    return keep


def pytest_collection_modifyitems(config, items):
    if config.getoption("quick"):
        items[:] = _quick(items, config)
    gpu = any("gpu" in item.keywords for item in items) and not has_gpu()
    missing = {"gpu": "needs a CUDA GPU" if gpu else None, "nvcc": None if HAS_NVCC else "needs nvcc"}
    for item in items:
        for mark, reason in missing.items():
            if reason and mark in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
    rank = {f"tests/{name}": i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable


@pytest.fixture
def make_ctx(tmp_path):
    """make_ctx(name="ws", gpus="auto", cpu_workers=1, config=None, echo=None, executor=None) -> Context."""
    made = []

    def make(name="ws", gpus="auto", cpu_workers=1, config=None, echo=None, executor=None) -> Context:
        ex = executor or LocalExecutor(cpu_workers=cpu_workers, gpus=gpus, progress=False)
        c = Context(store=Store(tmp_path / name), config=config or Config(), executor=ex,
                    echo=echo or (lambda s: None), progress=False)
        made.append(c)
        return c

    yield make
    for c in made:
        c.executor.close()
        c.store.close()


@pytest.fixture
def ctx(make_ctx):
    return make_ctx()


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory) -> Path:
    given = os.environ.get("SFTBUILD_COMPILE_CACHE")  # set by hand, it keeps builds across runs
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, which every worker shares (compile_task locks each key)
    path = Path(given) if given else root / "compile-cache"
    path.mkdir(parents=True, exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("SFTBUILD_COMPILE_CACHE", str(path))
    yield path
    patch.undo()


@pytest.fixture(scope="session")
def aten_workspace(tmp_path_factory) -> Path:
    from sftbuild.harvest import stage as harvest

    root = tmp_path_factory.mktemp("aten") / "ws"
    ex = LocalExecutor(cpu_workers=1, gpus="none", progress=False)
    c = Context(store=Store(root), config=Config(), executor=ex, echo=lambda s: None, progress=False)
    stats = harvest.run(c, ["torch-aten"])
    ex.close()
    c.store.close()
    assert stats["errors"] == {}, stats["errors"]
    return root


@pytest.fixture
def aten_copy(aten_workspace, tmp_path) -> Path:
    return Path(shutil.copytree(aten_workspace, tmp_path / "aten-ws"))
