"""30 hostile records (tests/sandbox/hostile/) through bind, validate, dedupe, review and export under
each layer `auto` can pick: nothing reaches the host, no planted secret reaches the store, `status` or
the export, and no payload is exported. The layer auto picks on this machine runs in every test run;
the fallbacks (one harvested workspace each, about 13 CPU-seconds) are `slow`."""
from __future__ import annotations

import os

import pytest

from tests.sandbox import hostile
from tests.sandbox.hostile_table import available


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("hostile")
    mp.setenv("SFTBUILD_CACHE", os.environ.get("SFTBUILD_CACHE") or os.path.expanduser("~/.cache/sftbuild"))
    listener = hostile.Listener()
    plan = hostile.prepare(root, listener.port)
    mp.setenv("HOME", str(root / "home"))
    mp.setenv("MPLCONFIGDIR", str(root / "mpl"))  # this process's own writes (the card's plots)
    mp.setenv("XDG_CACHE_HOME", str(root / "xdg-cache"))
    hostile.harvest(plan)
    yield plan, listener
    listener.close()
    mp.undo()


def _picked_here() -> str:
    return next((layer for layer in hostile.LAYERS if available(layer) is None and hostile.LAYERS[layer][1] == ""),
                "bwrap")


@pytest.mark.nvcc
@pytest.mark.parametrize("layer", [pytest.param(layer, marks=() if layer == _picked_here() else pytest.mark.slow)
                                   for layer in hostile.LAYERS])
def test_hostile_records_leave_nothing_on_the_host_or_in_the_data(layer, planned):
    why = available(layer)
    if why:
        pytest.skip(why)
    plan, listener = planned
    row = hostile.contain(plan, layer, listener)
    assert row["host_files_written"] == [], row["host_files_written"]
    assert (row["connections"], row["signals"]) == (0, 0)
    assert (row["secret_in_store"], row["secret_in_status"], row["secret_in_export"]) == (0, 0, 0), row["status"]
    assert row["payload_rows_exported"] == 0
    assert "sandbox_violation" in row["status"], row["status"]  # refusals are named, not `incorrect`
