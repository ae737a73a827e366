"""Fuzzing the three doors input comes through: the config loader, the source-spec parser and the
command line. Whatever comes in, only the project's own errors (ConfigError, PluginError,
SourceError) or a clean exit with a sentence come out, never another exception.

Example counts stay modest: these run in the main suite, which draws the same examples on every run
(derandomized), so a red suite names a change, never an unlucky draw. SFTBUILD_FUZZ_EXAMPLES=N draws N
fresh examples per test instead: that is how new cases are hunted, and each one found is kept as an
`@example` here.
"""
from __future__ import annotations

import dataclasses
import os

import pytest
import yaml
from click.testing import CliRunner

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sftbuild import config as C  # noqa: E402
from sftbuild import plugins  # noqa: E402
from sftbuild.cli import main  # noqa: E402
from sftbuild.harvest import specs  # noqa: E402
from sftbuild.harvest.sources import Source, SourceError  # noqa: E402

EXAMPLES = int(os.environ.get("SFTBUILD_FUZZ_EXAMPLES", "100"))
HUNT = "SFTBUILD_FUZZ_EXAMPLES" in os.environ  # fresh draws; else the same ones every run


def fuzz(examples: int = EXAMPLES):
    return settings(max_examples=examples, deadline=None, derandomize=not HUNT,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


FUZZ = fuzz()

SECTIONS = {f.name: [g.name for g in dataclasses.fields(f.default_factory())] for f in dataclasses.fields(C.Config)}
KEYS = sorted({*SECTIONS, *(k for ks in SECTIONS.values() for k in ks), "filters", "too_simple", "oversize",
               "max_bytes", "min_tokens", "nope"})

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["sm_90", "compute_80", "banana", "0,1", "auto", "en",
                                                           "local", "oph", "-1", ".nan", "split"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6), st.integers(-3, 3)), inner, max_size=4)),
    max_leaves=12)
configs = st.one_of(
    values,
    st.fixed_dictionaries({}, optional={s: st.dictionaries(st.sampled_from(ks + ["nope"]), values, max_size=4)
                                         for s, ks in SECTIONS.items()}),
)


@FUZZ
@given(configs)
def test_config_from_data_raises_only_config_errors(data):
    try:
        cfg = C.from_dict(data)
    except C.ConfigError as e:
        assert str(e) and "\n" not in str(e).strip() or "known:" in str(e)
        return
    try:
        plugins.check_config(cfg)
    except plugins.PluginError as e:
        assert str(e)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                 configs.map(lambda d: yaml.safe_dump(d, allow_unicode=True))))
def test_config_file_text_raises_only_config_errors(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("cfg") / "sftbuild.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        C.load(p)
    except C.ConfigError as e:
        assert str(e)


@pytest.fixture(scope="module")
def registry():
    return specs.load_registry()


spec_strings = st.one_of(
    st.text(max_size=80),
    st.builds(lambda pre, body, suf: pre + body + suf,
              st.sampled_from(["", "pip:", "git+", "https://", "file://", "inductor:", "./", "/", "~/", "../",
                               "git@github.com:", "kernelbench:"]),
              st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
              st.sampled_from(["", ".zip", ".tar.gz", ".whl", ".yaml", ".jsonl", ".parquet", ".py", "@main",
                               "==1.0", "/", "\x00"])),
    st.integers(300, 5000).map(lambda n: "a" * n),
)


@FUZZ
@given(spec_strings)
def test_source_specs_raise_only_source_errors(registry, spec):
    try:
        out = specs.parse_spec(spec, registry)
    except SourceError as e:
        assert str(e)
        return
    assert all(isinstance(s, Source) for s in out)


@FUZZ
@given(st.one_of(values, st.lists(values, max_size=3),
                 st.lists(st.dictionaries(st.sampled_from(["name", "kind", "location", "include", "bindings",
                                                           "revision", "license", "bogus"]),
                                          scalars, max_size=5), max_size=3)))
def test_registry_files_raise_only_source_errors(tmp_path_factory, entries):
    p = tmp_path_factory.mktemp("reg") / "reg.yaml"
    p.write_text(yaml.safe_dump({"sources": entries} if isinstance(entries, list) else entries), encoding="utf-8")
    try:
        specs.load_registry(p)
    except SourceError as e:
        assert str(e)


# ---- the command line ----------------------------------------------------------------------------------
# every command but those that start a server, or harvest the default sources when given none
COMMANDS = [["init"], ["harvest", "./no-such-source"], ["bind"], ["bindings"], ["describe"], ["validate"],
            ["dedupe"], ["review"], ["review", "sample"], ["review", "status"], ["review", "list"],
            ["review", "show"], ["review", "verdict"], ["review", "next"], ["review", "packet"],
            ["review", "import"], ["export"], ["status"], ["list"], ["ops"], []]
TOKENS = ["-w", "-c", "-q", "--quiet", "--json", "--force", "--how", "--pending", "--retired", "--reviewer",
          "--reason", "--format", "label-studio", "argilla", "--max-slowdown", "--memcheck", "--executor", "ray",
          "local", "--port", "--push-to-hub", "--allow-unpinned", "accept", "reject", "sample", "nan", "-1",
          "1e999", "0", "ws", "c.yaml", "filter", "relu", "--help", "--version", "\x00", "", "--", "-"]
argvs = st.builds(lambda cmd, rest: cmd + rest, st.sampled_from(COMMANDS),
                  st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=10),
                                     st.integers(256, 5000).map(lambda n: "d/" * n)), max_size=6))


@FUZZ
@given(argvs, st.sampled_from(["", "validate: {compile_timeout: -1}\n", "executor: {cpu_workers: 1}\n",
                               "{{{", "review: {fraction: .nan}\n"]))
def test_the_command_line_never_shows_a_traceback(tmp_path_factory, argv, config_text):
    runner = CliRunner()
    d = tmp_path_factory.mktemp("cli")
    cwd = os.getcwd()
    os.chdir(d)
    try:
        (d / "c.yaml").write_text(config_text)
        result = runner.invoke(main, argv, input="q\n")
    finally:
        os.chdir(cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit), (argv, repr(result.exception))
    assert "Traceback" not in result.output
    if result.exit_code not in (0, None):
        assert "Error" in result.output or "Usage" in result.output, (argv, result.output)


# ---- hostile archives ------------------------------------------------------------------------------------
def _valid_archives() -> dict[str, bytes]:
    import io
    import tarfile
    import zipfile

    code = b"__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n"
    z = io.BytesIO()
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as f:
        f.writestr("pkg/k.cu", code)
        f.writestr("pkg/README", b"x" * 300)
    out = {".zip": z.getvalue(), ".whl": z.getvalue()}
    for suffix, mode in ((".tar.gz", "w:gz"), (".tar", "w"), (".tar.bz2", "w:bz2"), (".tar.xz", "w:xz")):
        t = io.BytesIO()
        with tarfile.open(fileobj=t, mode=mode) as f:
            info = tarfile.TarInfo("pkg/k.cu")
            info.size = len(code)
            f.addfile(info, io.BytesIO(code))
        out[suffix] = t.getvalue()
    return out


VALID = _valid_archives()


def _nameless_member() -> bytes:
    """A zip with a member named '' (a fuzz run made one by damaging VALID's central directory)."""
    import io
    import zipfile

    z = io.BytesIO()
    with zipfile.ZipFile(z, "w") as f:
        f.writestr(zipfile.ZipInfo(""), b"x")
        f.writestr("pkg/k.cu", b"__global__ void k() {}\n")
    return z.getvalue()


@st.composite
def archives(draw):
    suffix = draw(st.sampled_from(sorted(VALID)))
    data = bytearray(VALID[suffix])
    how = draw(st.sampled_from(["flip", "truncate", "random"]))
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif how == "truncate":
        data = data[:draw(st.integers(0, len(data) - 1))]
    else:
        data = bytearray(draw(st.binary(max_size=600)))
    return suffix, bytes(data)


@fuzz(max(20, EXAMPLES // 2))
@given(archives())
@example((".whl", _nameless_member()))
def test_a_mangled_archive_is_a_reported_source_error(make_ctx, tmp_path_factory, archive):
    from sftbuild.harvest import stage

    suffix, data = archive
    d = tmp_path_factory.mktemp("arc")
    path = d / f"pkg-1.0{suffix}"
    path.write_bytes(data)
    said = []
    ctx = make_ctx(name=f"ws-{d.name}", gpus="none", echo=said.append)
    stats = stage.run(ctx, [str(path)])
    if str(path) in stats["errors"]:
        msg = stats["errors"][str(path)]
        assert msg and "could not be read" not in msg, msg  # a known failure, said as such
        assert any(line.startswith(f"harvest: source {path}:") for line in said)
    else:
        assert stats["sources"][str(path)] >= 0
    assert ctx.store.manifests()[-1]["finished"] is not None
