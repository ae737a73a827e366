import pytest
import yaml

from sftbuild import config as C


def test_defaults_without_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = C.load(None)
    assert cfg.validate.arch == "sm_90" and cfg.validate.compile_timeout == 30
    assert cfg.review.fraction == 0.1
    assert cfg.dedupe.num_perm == 256 and cfg.dedupe.bands * cfg.dedupe.rows == 256


def test_template_matches_defaults(tmp_path):
    p = tmp_path / "sftbuild.yaml"
    p.write_text(C.TEMPLATE)
    assert C.load(p).to_dict() == C.Config().to_dict()


@pytest.mark.parametrize("text, key", [
    ("validate: {compile_timeout: soon}", "validate.compile_timeout"),
    ("validate: {nope: 1}", "validate.nope"),
    ("bogus: {}", "bogus"),
    ("review: {fraction: 2}", "review.fraction"),
    ("executor: {kind: spark}", "executor.kind"),
    ("harvest: {sources: torch-aten}", "harvest.sources"),
    ("dedupe: {bands: 64, rows: 8}", "dedupe.bands"),
    ("validate: {timing: 'yes'}", "validate.timing"),
])
def test_bad_config_names_the_key(tmp_path, text, key):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(C.ConfigError, match=key.replace(".", r"\.")):
        C.load(p)


def test_invalid_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("validate: [unclosed")
    with pytest.raises(C.ConfigError, match="not valid YAML"):
        C.load(p)
    with pytest.raises(C.ConfigError, match="does not exist"):
        C.load(tmp_path / "missing.yaml")


def test_values_are_typed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"validate": {"max_slowdown": 1.5, "shapes": 4}, "harvest": {"sources": ["a"]}}))
    cfg = C.load(p)
    assert cfg.validate.max_slowdown == 1.5 and cfg.validate.shapes == 4 and cfg.harvest.sources == ["a"]


def test_a_key_written_twice_is_refused_anchors_and_merges_are_not(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("harvest:\n  min_kernel_lines: 5\nvalidate: {timing: false}\nharvest:\n  seed: 3\n")
    with pytest.raises(C.ConfigError, match=r"key 'harvest' is written twice \(lines 1 and 4\)"):
        C.load(p)
    assert C.load_yaml("a: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\n") == {"a": {"x": 1, "y": 2}, "c": {"x": 1, "y": 3}}
    assert C.load_yaml("{1: a, '1': b}") == {1: "a", "1": "b"}  # an int key and a string key differ
