"""Licences found where they are written: wheels (dist-info METADATA), sdists (PKG-INFO), unpacked
trees (LICENSE files), installed package folders; their precedence; and provenance's license_source."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from sftbuild.harvest import license as L
from sftbuild.harvest import stage

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2, mask=mask)


def double(x, y):
    double_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
'''

MIT = """MIT License

Copyright (c) 2024 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files (the "Software"), to deal in the Software without restriction, including without limitation
the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software.

The above copyright notice and this permission notice shall be included in all copies or substantial portions of
the Software.
"""
APACHE = """                                 Apache License
                           Version 2.0, January 2004
                        http://www.apache.org/licenses/

   TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION
"""
BSD3 = """Copyright (c) 2024, Someone
All rights reserved.

Redistribution and use in source and binary forms, with or without modification, are permitted provided that the
following conditions are met:
1. Redistributions of source code must retain the above copyright notice, this list of conditions and the
   following disclaimer.
2. Redistributions in binary form must reproduce the above copyright notice, this list of conditions and the
   following disclaimer in the documentation and/or other materials provided with the distribution.
3. Neither the name of the copyright holder nor the names of its contributors may be used to endorse or promote
   products derived from this software without specific prior written permission.
"""
BSD2 = BSD3.split("3. Neither")[0]


def wheel(path: Path, name: str, metadata: str, files: dict[str, str] | None = None) -> Path:
    """A tiny wheel: `name/ops.py` holding one Triton kernel, its dist-info METADATA and RECORD."""
    whl = path / f"{name}-1.0-py3-none-any.whl"
    members = {f"{name}/__init__.py": "", f"{name}/ops.py": KERNEL.replace("double", name),
               f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.4\nName: {name}\nVersion: 1.0\n{metadata}\n",
               f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\n", **(files or {})}
    members[f"{name}-1.0.dist-info/RECORD"] = "".join(f"{m},,\n" for m in members)
    with zipfile.ZipFile(whl, "w") as z:
        for m, text in members.items():
            z.writestr(m, text)
    return whl


def sdist(path: Path, name: str, pkg_info: str, files: dict[str, str] | None = None) -> Path:
    arc = path / f"{name}-1.0.tar.gz"
    members = {f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{pkg_info}\n",
               f"{name}-1.0/src/{name}/ops.py": KERNEL.replace("double", name), **(files or {})}
    with tarfile.open(arc, "w:gz") as t:
        for m, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(m)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return arc


def licences(ctx) -> dict[str, tuple[str, str]]:
    """{(package or path): (license, license_source)} of every record."""
    return {r.provenance.get("package") or r.provenance["path"]: (r.provenance["license"],
                                                                  r.provenance["license_source"])
            for r in ctx.store.records()}


# ---- package metadata ------------------------------------------------------------------
def test_local_wheel_license_expression(ctx, tmp_path):
    whl = wheel(tmp_path, "exprpkg", "License-Expression: Apache-2.0 OR MIT\nLicense: something else")
    stats = stage.run(ctx, [str(whl)])
    assert stats["errors"] == {} and stats["sources"][str(whl)] == 1
    assert licences(ctx) == {"exprpkg": ("Apache-2.0 OR MIT", "metadata")}


def test_local_wheel_only_a_classifier(ctx, tmp_path):
    whl = wheel(tmp_path, "classpkg", "Classifier: Programming Language :: Python :: 3\n"
                                      "Classifier: License :: OSI Approved :: MIT License")
    stage.run(ctx, [str(whl)])
    assert licences(ctx) == {"classpkg": ("MIT", "metadata")}


def test_wheel_licence_file_in_dist_info_beats_a_vague_classifier(ctx, tmp_path):
    whl = wheel(tmp_path, "filepkg", "License: BSD\nClassifier: License :: OSI Approved :: BSD License\n"
                                     "License-File: LICENSE",
                {"filepkg-1.0.dist-info/licenses/LICENSE": BSD2,
                 "filepkg-1.0.dist-info/licenses/NOTICE": APACHE})
    stage.run(ctx, [str(whl)])
    assert licences(ctx) == {"filepkg": ("BSD-2-Clause", "metadata")}


def test_wheelhouse_each_wheel_its_own_licence(ctx, tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    wheel(house, "mitpkg", "License: MIT License")
    wheel(house, "apachepkg", "License: Apache Software License")
    wheel(house, "nolicpkg", "License: UNKNOWN\nClassifier: License :: OSI Approved :: BSD License")
    stats = stage.run(ctx, [str(house)])
    assert stats["errors"] == {}
    assert licences(ctx) == {"mitpkg": ("MIT", "metadata"), "apachepkg": ("Apache-2.0", "metadata"),
                             "nolicpkg": ("unknown", "unknown")}


def test_sdist_pkg_info(ctx, tmp_path):
    arc = sdist(tmp_path, "sdpkg", "License: BSD 3-Clause License")
    stats = stage.run(ctx, [str(arc)])
    assert stats["errors"] == {}
    assert licences(ctx) == {"sdpkg": ("BSD-3-Clause", "metadata")}


def test_sdist_license_file_beats_pkg_info(ctx, tmp_path):
    arc = sdist(tmp_path, "sdfile", "License: MIT", {"sdfile-1.0/LICENSE": APACHE})
    stage.run(ctx, [str(arc)])
    assert licences(ctx) == {"sdfile": ("Apache-2.0", "file:sdfile-1.0/LICENSE")}


def test_local_pip_path_reads_without_pip(ctx, tmp_path):
    whl = wheel(tmp_path, "pippkg", "License-Expression: MIT")
    spec = f"pip:{whl}"
    stats = stage.run(ctx, [spec])
    assert stats["errors"] == {}, stats["errors"]
    [r] = ctx.store.records()
    assert (r.provenance["license"], r.provenance["license_source"]) == ("MIT", "metadata")
    assert (r.provenance["source_kind"], r.provenance["package"], r.provenance["version"]) == ("pip", "pippkg", "1.0")
    assert "does not exist" in stage.run(ctx, [f"pip:{tmp_path}/missing.whl"])["errors"][f"pip:{tmp_path}/missing.whl"]


def test_local_pip_folder_is_read_in_place(make_ctx, tmp_path):
    unpacked = tmp_path / "unpacked"
    with tarfile.open(sdist(tmp_path, "dirpkg", "License-Expression: MPL-2.0")) as t:
        t.extractall(unpacked)
    ctx = make_ctx()
    stats = stage.run(ctx, [f"pip:{unpacked}"])
    assert stats["errors"] == {}, stats["errors"]
    [r] = ctx.store.records()
    assert (r.provenance["license"], r.provenance["license_source"]) == ("MPL-2.0", "metadata")
    assert r.provenance["path"] == "dirpkg-1.0/src/dirpkg/ops.py"


def test_installed_package_folder_takes_its_dist_info(ctx, tmp_path):
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel(tmp_path, "instpkg", "License-Expression: BSD-2-Clause")) as z:
        z.extractall(site)
    wheel(tmp_path, "other", "License-Expression: GPL-3.0-only")
    with zipfile.ZipFile(tmp_path / "other-1.0-py3-none-any.whl") as z:
        z.extractall(site)
    stage.run(ctx, [str(site / "instpkg")])  # the package folder alone: its dist-info is beside it
    assert licences(ctx) == {"ops.py": ("BSD-2-Clause", "metadata")}


def test_site_packages_each_package_its_dist_info(make_ctx, tmp_path):
    site = tmp_path / "site-packages"
    for name, expr in (("apkg", "MIT"), ("bpkg", "Apache-2.0")):
        with zipfile.ZipFile(wheel(tmp_path, name, f"License-Expression: {expr}")) as z:
            z.extractall(site)
    (site / "loose").mkdir()
    (site / "loose" / "ops.py").write_text(KERNEL.replace("double", "loose"))
    ctx = make_ctx()
    stage.run(ctx, [str(site)])
    assert licences(ctx) == {"apkg/ops.py": ("MIT", "metadata"), "bpkg/ops.py": ("Apache-2.0", "metadata"),
                             "loose/ops.py": ("unknown", "unknown")}


# ---- unpacked trees and precedence ---------------------------------------------------
@pytest.mark.parametrize("text, spdx", [(MIT, "MIT"), (APACHE, "Apache-2.0"), (BSD3, "BSD-3-Clause"),
                                        (BSD2, "BSD-2-Clause")])
def test_unpacked_tree_license_file(make_ctx, tmp_path, text, spdx):
    d = tmp_path / "tree"
    (d / "pkg" / "ops").mkdir(parents=True)
    (d / "LICENSE.txt").write_text(text)
    (d / "pkg" / "ops" / "k.py").write_text(KERNEL)
    ctx = make_ctx()
    stage.run(ctx, [str(d)])
    assert licences(ctx) == {"pkg/ops/k.py": (spdx, "file:LICENSE.txt")}


def test_precedence_header_file_metadata_registry(make_ctx, tmp_path):
    d = tmp_path / "pkg-1.0"
    for sub in ("headed", "filed/deep", "plain"):
        (d / sub).mkdir(parents=True)
    (d / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: pkg\nLicense-Expression: BSD-3-Clause\n")
    (d / "headed" / "k.py").write_text("# SPDX-License-Identifier: Apache-2.0\n" + KERNEL)
    (d / "filed" / "COPYING").write_text(MIT)
    (d / "filed" / "LICENSE-THIRD-PARTY").write_text(APACHE)  # another project's licence: ignored
    (d / "filed" / "deep" / "k.py").write_text(KERNEL.replace("double", "deep"))
    (d / "plain" / "k.py").write_text(KERNEL.replace("double", "plain"))
    reg = tmp_path / "reg.yaml"
    reg.write_text(f"sources:\n  - name: mine\n    kind: dir\n    location: {d}\n    license: GPL-2.0-only\n")
    ctx = make_ctx()
    stats = stage.run(ctx, [str(reg)])
    assert stats["errors"] == {}
    assert licences(ctx) == {"headed/k.py": ("Apache-2.0", "header"),
                             "filed/deep/k.py": ("MIT", "file:filed/COPYING"),
                             "plain/k.py": ("BSD-3-Clause", "metadata")}
    (d / "PKG-INFO").unlink()
    ctx2 = make_ctx("ws2")  # without package metadata, the registry's licence applies
    stage.run(ctx2, [str(reg)])
    assert licences(ctx2)["plain/k.py"] == ("GPL-2.0-only", "registry")


def test_license_file_never_read_above_the_root(ctx, tmp_path):
    (tmp_path / "LICENSE").write_text(MIT)
    d = tmp_path / "inner"
    d.mkdir()
    (d / "k.py").write_text(KERNEL)
    stage.run(ctx, [str(d)])
    assert licences(ctx) == {"k.py": ("unknown", "unknown")}


# ---- the pieces --------------------------------------------------------------------
@pytest.mark.parametrize("value, spdx", [
    ("MIT", "MIT"), ("mit license", "MIT"), ("BSD 2-CLAUSE LICENSE", "BSD-2-Clause"), ("new BSD", "BSD-3-Clause"),
    ("Apache License, Version 2.0", "Apache-2.0"), ("apache-2.0 or mit", "Apache-2.0 OR MIT"),
    ("Apache-2.0 WITH LLVM-exception", "Apache-2.0 WITH LLVM-exception"), ("GPLv3", "GPL-3.0-only"),
    ("BSD", None), ("UNKNOWN", None), ("Other/Proprietary License", None), ("Dual", None), ("", None)])
def test_normalize(value, spdx):
    assert L.normalize(value) == spdx


def test_texts_and_gpl_variants():
    gpl_notice = ("This program is free software: you can redistribute it and/or modify it under the terms of the "
                  "GNU General Public License as published by the Free Software Foundation, either version 3 of "
                  "the License, or (at your option) any later version.")
    assert L.from_text(gpl_notice) == "GPL-3.0-or-later"
    assert L.from_text("GNU LESSER GENERAL PUBLIC LICENSE\nVersion 2.1, February 1999\nPreamble\n") == "LGPL-2.1-only"
    assert L.from_text("Mozilla Public License Version 2.0\n==================================") == "MPL-2.0"
    assert L.from_text("// SPDX-License-Identifier: BSD-3-Clause */\n") == "BSD-3-Clause"
    assert L.from_text("Copyright 2024. All rights reserved.") is None
    assert L.classifier("License :: OSI Approved :: BSD License") is None
    assert L.classifier("License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)") == "MPL-2.0"


def test_pyproject_license(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nlicense = {text = "Apache 2.0"}\n')
    assert L.from_package(tmp_path) == "Apache-2.0"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nlicense = "BSD-3-Clause"\n')
    assert L.from_package(tmp_path) == "BSD-3-Clause"


@pytest.mark.parametrize("whl, spdx", [("liger_kernel-0.8.5-py3-none-any.whl", "BSD-2-Clause"),
                                       ("flag_gems-5.0.2-py3-none-any.whl", "Apache-2.0")])
def test_real_wheels_metadata(tmp_path, whl, spdx):
    path = Path("/work/pkgs") / whl
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path, [m for m in z.namelist() if ".dist-info/" in m])
    assert L.package_licenses(tmp_path) == [("", spdx)]



def test_a_licence_added_later_reaches_the_record_and_dedupe(tmp_path):
    import json

    from click.testing import CliRunner

    from sftbuild.cli import main
    from sftbuild.store import Store

    d = tmp_path / "pkg"
    d.mkdir()
    (d / "scale.cu").write_text("__global__ void scale_kernel(float* y, const float* x, int n) {\n"
                                "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                "  if (i < n) {\n    y[i] = 3.0f * x[i];\n  }\n}\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("executor: {cpu_workers: 1, gpus: none}\n")
    ws = tmp_path / "ws"

    def cli(*args):
        r = CliRunner().invoke(main, [*args, "-q", "-w", str(ws), "-c", str(cfg)])
        assert r.exit_code == 0, r.output
        return r.output

    def stored():
        store = Store(ws)
        try:
            return {r.provenance["license"] for r in store.records()}
        finally:
            store.close()

    def filtered():
        return json.loads((ws / "reports" / "clusters.json").read_text())["counts"]["filtered"]

    cli("harvest", str(d))
    cli("dedupe")
    assert stored() == {"unknown"} and filtered() == {"license": 1}
    (d / "LICENSE").write_text(MIT)
    cli("harvest", str(d))
    assert stored() == {"MIT"}
    out = cli("dedupe")
    assert "nothing changed" not in out and filtered() == {}, out
