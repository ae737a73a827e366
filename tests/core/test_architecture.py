"""The architecture as tests: the import graph's contract, the stage table, the plug-in idiom."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild import config as C
from sftbuild import plugins, stages
from sftbuild.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_import_contract_holds():
    """lint-imports checks pyproject's contracts: layers in pipeline order, and no cycles."""
    exe = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(exe) if exe.exists() else "lint-imports", "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_stage_commands_start_without_torch():
    """Every stage's module, the validator's pipeline and the plug-in registries import without torch
    (2 s a start): a command with nothing for the op registry to do (dedupe, export, a stage whose
    records are all done, validate's compile gates) never loads it; the registry and the references
    import it where a record needs them. `sftbuild list` loads every plug-in without torch or datasets
    (10 s before)."""
    mods = ["sftbuild.cli", "sftbuild.ops", "sftbuild.bind.binders", "sftbuild.validate.pipeline",
            *(s.module for s in stages.STAGES), *(s.first for s in stages.STAGES if s.first)]
    code = (f"import sys\nfor m in {mods!r}: __import__(m)\n"
            "from sftbuild import plugins\nplugins.describe(None)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'datasets'))[:3])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_help_lists_stages_in_pipeline_order():
    text = CliRunner().invoke(main, ["--help"]).output
    listed = [line.split()[0] for line in text.split("Commands:")[1].splitlines() if line.strip()]
    positions = [listed.index(name) for name in stages.NAMES]
    assert positions == sorted(positions) and listed[0] == "init"


def test_store_and_run_use_the_one_stage_table():
    from sftbuild import store

    assert store.STAGES == stages.NAMES
    for st in stages.STAGES:
        assert callable(stages.module(st.name).run)


def test_every_extension_point_lists_plugins_with_docstrings():
    rows = plugins.describe()
    kinds = {k for k, _, _ in rows}
    assert kinds == set(plugins.POINTS)
    for kind, name, summary in rows:
        assert name and summary, f"{kind} {name!r} has no docstring"
    out = CliRunner().invoke(main, ["list"])
    assert out.exit_code == 0 and all(f"{k}:" in out.output for k in plugins.POINTS)
    bad = CliRunner().invoke(main, ["list", "nonsense"])
    assert bad.exit_code != 0 and "unknown plug-in kind" in bad.output and "Traceback" not in bad.output


def test_registry_register_get_configure():
    class Thing(plugins.Plugin):
        """A test base."""

    reg = plugins.Registry("test_thing", Thing)

    @reg.register
    class Small(Thing):
        """Small things."""
        name = "small"

        @dataclasses.dataclass
        class Params:
            size: int = 3

    @reg.register
    class Big(Thing):
        """Big things."""
        name = "big"
        order = 1

    assert reg.names() == ["small", "big"]
    assert [p.name for p in reg.configured({})] == ["big", "small"]
    assert [p.params.size for p in reg.configured({"small": {"size": 5}, "big": False})] == [5]
    with pytest.raises(plugins.PluginError, match="test_thing.small.size: expected an integer"):
        reg.configured({"small": {"size": "huge"}})
    with pytest.raises(plugins.PluginError, match="unknown test_thing.*known: small, big"):
        reg.configured({"tiny": {}})
    with pytest.raises(TypeError, match="registered twice"):
        reg.register(type("Other", (Thing,), {"name": "small", "__qualname__": "Other"}))
    plugins.REGISTRIES.pop("test_thing")


def test_init_template_loads_to_the_defaults_and_documents_every_field(tmp_path):
    os.chdir(tmp_path)
    out = CliRunner().invoke(main, ["init", "c.yaml"])
    assert out.exit_code == 0, out.output
    text = (tmp_path / "c.yaml").read_text()
    assert C.load(tmp_path / "c.yaml").to_dict() == C.Config().to_dict()
    for section in dataclasses.fields(C.Config):
        for f in dataclasses.fields(getattr(C.Config(), section.name)):
            assert f"  {f.name}: " in text and f.metadata.get("help"), f"{section.name}.{f.name}"


@pytest.mark.parametrize("text, message", [
    ("validate: {compile_timeout: 0}", "validate.compile_timeout: must be > 0"),
    ("review: {fraction: 0}", "review.fraction: must be > 0"),
    ("executor: {cpu_workers: -4}", "executor.cpu_workers: must be >= 0"),
    ("describe: {languages: [klingon]}", "describe.languages: expected one of en, zh"),
    ("validate: {memcheck: sometimes}", "validate.memcheck: expected one of off, sample, all"),
])
def test_ranges_and_choices_come_from_the_field_declarations(tmp_path, text, message):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(C.ConfigError, match=message.replace(".", r"\.")):
        C.load(p)


def test_a_key_that_became_a_plugin_parameter_says_where_it_went(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("dedupe: {min_tokens: 40}")
    with pytest.raises(C.ConfigError, match=r"moved to dedupe\.filters\.too_simple\.min_tokens"):
        C.load(p)


def test_the_readme_install_works_on_a_plain_machine():
    """The first command takes torch's CPU build from PyTorch's public index (PyPI's Linux torch is the CUDA
    build), and the project's own install brings Triton, which runs Triton kernels without a GPU."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    first = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].splitlines()[0]
    assert "https://download.pytorch.org/whl/cpu" in first and first.endswith("sftbuild run")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("triton") and "linux" in d for d in deps), deps


def test_no_module_is_reached_through_a_string_the_contract_cannot_see():
    """A module path written as a string (a worker's task function, a plug-in's module) names a room
    that the registries declare or that a real import already reaches: none is a back door past the
    import contract (bench/structure.py draws the whole house)."""
    import grimp

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import structure
    finally:
        sys.path.remove(str(ROOT / "bench"))
    # the binders once named validate's probes as strings from ops/: that is what it reports
    assert structure.back_doors({("bind", "trial"): 3}, {("bind", "trial"): 1, ("ops", "validate"): 3,
                                                         ("plugins", "trial"): 2}) == [("ops", "validate")]
    graph = grimp.build_graph("sftbuild", include_external_packages=False)
    assert structure.back_doors(structure.arrows(graph), structure.hidden(graph)) == []
