"""Bindings to the file's own CPU reference, called through the file's own host launcher.

Invariants:
  * Harvest's `entry["file_reference"]` (a launcher and the CPU function computing the same thing)
    becomes a binding `how: file_reference` only when the trials can plan sizes for it
    (sftbuild.trial.file_reference: the plans, shared with the file-reference trials).
  * main()'s own acceptance test per validated array rides along as `ref["acceptance"]`
    (sftbuild.trial.acceptance), where it can be read.
"""
from __future__ import annotations

import re

from sftbuild.bind.binders import BINDERS, Binder
from sftbuild.trial import acceptance
from sftbuild.trial.file_reference import (  # noqa: F401  (tests read the plans through the binder)
    device_globals, element_dtypes, global_slots, kernel_reads, pairs, plans, slots)


@BINDERS.register
class FileReference(Binder):
    """The file's own CPU reference (`*_cpu`, `*_reference`, `ref_*`), called through its host launcher."""
    name = "file_reference"
    version = 1
    order = 30

    def bind(self, record) -> dict | None:
        ref = record.entry.get("file_reference")
        if not ref or not ref.get("launcher") or not ref.get("cpu"):
            return None
        # device properties main() would have filled (cudaGetDeviceProperties) before calling launchers
        props = re.findall(r"(?m)^\s*cudaDeviceProp\s+(\w+)\s*;", record.code)
        texts = [record.code, *(record.entry.get("headers") or {}).values()]
        path = (record.provenance or {}).get("path", "")
        ref = {**ref, "device_props": props, "device_globals": device_globals(texts),
               "kernel_reads": kernel_reads(record.entry.get("params") or [])}
        launch = slots(ref)
        ref["acceptance"] = acceptance.rules(ref, texts, launch)  # main()'s own test per validated array, where read
        try:
            if not pairs(ref, plans(ref)):
                return None
        except ValueError:
            return None
        return {"kind": "program", "program": f"{path}:{ref['cpu']}", "how": "file_reference",
                "harness": "file_reference", "dtypes": element_dtypes(launch, texts),
                "cpu_reference": ref["cpu"], "launcher": ref["launcher"],
                "harness_args": {"ref": ref, "slots": launch, "file_buffers": global_slots(ref)}}

