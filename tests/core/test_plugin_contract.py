"""Every registered plug-in of every kind meets its kind's contract.

The cases are drawn from the registries, so a new plug-in adds cases here and breaks no other test;
a new kind needs its hooks named in HOOKS. EXAMPLES holds the one file a newcomer writes for each
kind, and each is shown to register and pass its contract beside the built-in ones.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest

from sftbuild import plugins
from sftbuild.record import LANGUAGES

HOOKS = {  # kind -> the base-class hooks of which each plug-in overrides at least one
    "source": ("recognise", "materialize", "harvest"),
    "catalog": ("programs",),
    "file_filter": ("check_path", "check_data"),
    "binder": ("bind", "plan"),
    "describer": ("detect", "cuda", "triton"),
    "static_check": ("check",),
    "runtime_check": ("after_call", "after_profile", "after_trial"),
    "filter": ("filter",),
    "exporter": ("tables", "files", "write"),
    "candidate_kind": ("takes",),
}
CUDA = "__global__ void add_kernel(float* y, const float* x, int n) {\n" \
       "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] += x[i];\n}\n"
TRITON = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
          "def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
          "    mask = offs < n\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)\n")
PLAIN = {"cuda": CUDA, "triton": TRITON}
CASES = [(kind, name) for kind in plugins.POINTS for name in plugins.registry(kind).names()]


def meets_contract(kind: str, cls: type) -> None:
    """The contract of every plug-in, then its kind's: asserts what `cls` must be to be registered as `kind`."""
    reg = plugins.registry(kind)
    assert re.fullmatch(r"[a-z][a-z0-9_-]*", cls.name), cls.name
    assert inspect.getdoc(cls) and cls.__doc__ is not reg.base.__doc__ and cls.summary(), "a docstring"
    assert "version" in vars(cls) and isinstance(cls.version, int) and cls.version >= 1, "its own version"
    assert set(getattr(cls, "languages", None) or ()) <= set(LANGUAGES)
    plugin = cls()  # every parameter has a default
    json.dumps(plugin.params.__dict__, default=str)
    assert any(h in vars(k) for k in cls.__mro__[: cls.__mro__.index(reg.base)] for h in HOOKS[kind]), \
        f"overrides one of {HOOKS[kind]}"
    behaves = globals().get(f"_{kind}")
    if behaves:
        behaves(plugin)


def _file_filter(f) -> None:  # an ordinary kernel file passes
    assert f.check_path("kernels/add.cu", len(CUDA)) is None and f.check_data("kernels/add.cu", CUDA.encode()) is None


def _static_check(c) -> None:  # plain kernels raise nothing
    from sftbuild.validate.static import Source

    for lang in set(c.languages) & set(PLAIN):
        assert list(c.check(Source(PLAIN[lang], lang))) == []


def _runtime_check(c) -> None:  # a field the loop could not fill is empty, and then every check passes
    from sftbuild.trial.checks import Call, Outcome, Profile

    assert c.after_call(Call(inputs=[], outputs=[])) is None
    assert c.after_profile(Profile(kernels=[])) is None
    assert c.after_trial(Outcome(same_output=False, same_reference=False, references=[])) is None


def _filter(f) -> None:  # a plain, licensed kernel is kept
    from sftbuild.dedupe.near import Doc

    good = (Path(__file__).parents[1] / "data" / "dedupe" / "kernels" / "relu__basic.cu").read_text()
    assert f.check(Doc("k", good, license="MIT")) is None
    json.dumps(f.manifest())


def _describer(d) -> None:  # instructions name the technique in both languages, and read it back as its own
    from sftbuild.describe import text as T

    for lang in ("en", "zh"):
        assert T.claims(f"Use {d.phrase[lang]}.")["techniques"] == [d.name], lang


def _exporter(e) -> None:  # an export of no records from an empty workspace writes no rows and raises nothing
    import tempfile

    from sftbuild.output.exporters import Batch
    from sftbuild.store import Store

    with tempfile.TemporaryDirectory() as ws:
        store = Store(ws)
        batch = Batch(samples=[], store=store, funnel=store.funnel())
        assert all(not rows for t in e.tables(batch).values() for rows in t.splits.values())
        assert isinstance(e.files(batch), dict)
        store.close()


def _candidate_kind(k) -> None:  # it names its worker's task function and a build, and takes no unbound record
    from sftbuild.trial import kinds

    assert re.fullmatch(r"[\w.]+:\w+", k.runner) and k.build in ("harness", "module") and k.languages, k.name
    assert kinds.of(None, k.languages[0]) is None


def _binder(b) -> None:  # a running binder names the task its worker runs
    assert not b.runs_code or re.fullmatch(r"[\w.]+:\w+", b.task_fn), b.task_fn


@pytest.mark.parametrize("kind, name", CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_every_registered_plugin_meets_its_contract(kind, name):
    meets_contract(kind, plugins.registry(kind).get(name))


def test_every_kind_has_a_contract_and_members():
    assert set(HOOKS) == set(plugins.POINTS)
    assert {k for k, _ in CASES} == set(plugins.POINTS)


# ---- the one file a newcomer writes, per kind: sftbuild/<folder>/<name>.py ----------------------
EXAMPLES = {
    "source": ("harvest/kinds", '''
        from sftbuild.harvest.kinds import KINDS, SourceKind

        @KINDS.register
        class Empty(SourceKind):
            """`empty:`: a source that holds no kernels (a template for new kinds)."""
            name = "example-empty"
            version = 1

            def harvest(self, h):
                return None
    '''),
    "catalog": ("harvest/catalog", '''
        from sftbuild.harvest.catalog import CATALOGS, Catalog

        @CATALOGS.register
        class NoPrograms(Catalog):
            """No reference programs (a template for new catalogs)."""
            name = "example_none"
            version = 1

            def programs(self, count, seed):
                return []
    '''),
    "file_filter": ("harvest/filters", '''
        from sftbuild.harvest.filters import FILE_FILTERS, FileFilter

        @FILE_FILTERS.register
        class Backup(FileFilter):
            """Editor backups (`*.cu~`) are not sources."""
            name = "example_backup"
            version = 1

            def check_path(self, rel, size):
                return "editor backup" if rel.endswith("~") else None
    '''),
    "binder": ("bind/binders", '''
        from sftbuild.bind.binders import BINDERS, Binder

        @BINDERS.register
        class Never(Binder):
            """Binds nothing (a template for new static binders)."""
            name = "example_never"
            version = 1

            def bind(self, record):
                return None
    '''),
    "describer": ("describe/describers", '''
        from sftbuild.describe.describers import DESCRIBERS, Describer

        @DESCRIBERS.register
        class Printf(Describer):
            """Device-side printf."""
            name = "example_printf"
            version = 1
            phrase = {"en": "device-side printf", "zh": "设备端 printf"}
            claim = r"printf"

            def cuda(self, s):
                return s.has("printf")
    '''),
    "static_check": ("validate/static", '''
        from sftbuild.validate.static import STATIC_CHECKS, StaticCheck

        @STATIC_CHECKS.register
        class NoTrap(StaticCheck):
            """`__trap()` aborts the whole context: a kernel that calls it is dropped."""
            name = "example_no_trap"
            version = 1
            languages = ("cuda",)

            def check(self, src):
                if "__trap(" in src.cuda:
                    yield self.found("cheat", "calls __trap()")
    '''),
    "runtime_check": ("trial/checks", '''
        from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck

        @RUNTIME_CHECKS.register
        class SomeOutput(RuntimeCheck):
            """A call that should return outputs returned some."""
            name = "example_some_output"
            version = 1

            def after_call(self, call):
                if call.expected and not call.outputs:
                    return self.found("incorrect", "no outputs")
    '''),
    "candidate_kind": ("trial/kinds", '''
        from sftbuild.trial.kinds import KINDS, Kind

        @KINDS.register
        class ProgramPair(Kind):
            """A CUDA record bound to a reference program (a template for new kinds)."""
            name = "example_program"
            version = 1
            languages = ("cuda",)
            runner = "sftbuild.trial.trials:run_record"
            build = "harness"

            def takes(self, binding, language):
                return binding.get("kind") == "program" and binding.get("how") != "file_reference"
    '''),
    "filter": ("dedupe/filters", '''
        from sftbuild.dedupe.filters import FILTERS, Filter

        @FILTERS.register
        class NoTabs(Filter):
            """Drop samples indented with tabs."""
            name = "example_no_tabs"
            version = 1

            def filter(self, doc):
                return "\\n\\t" not in doc.text or (False, "tab indentation")
    '''),
    "exporter": ("output/exporters", '''
        from sftbuild.output.exporters import EXPORTERS, Exporter

        @EXPORTERS.register
        class Ids(Exporter):
            """ids.txt: the exported record ids, one a line."""
            name = "example_ids"
            version = 1

            def files(self, batch):
                return {"ids.txt": "".join(f"{r.id}\\n" for r in batch.records)}
    '''),
}


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_a_newcomers_plugin_file_registers_and_meets_its_contract(kind, tmp_path, monkeypatch):
    folder, text = EXAMPLES[kind]
    reg = plugins.registry(kind)
    before = reg.names()
    monkeypatch.setattr(reg, "_members", dict(reg._members))  # the example leaves the registry as it was
    path = tmp_path / f"example_{kind}.py"
    path.write_text(textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location(f"example_{kind}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    added = [n for n in reg.names() if n not in before]
    assert len(added) == 1 and (Path(plugins.__file__).parent / folder).is_dir()
    meets_contract(kind, reg.get(added[0]))
    assert added[0] in [p.name for p in reg.configured({})]  # on by default, like every plug-in
    assert len(textwrap.dedent(text).strip().splitlines()) <= 15
