"""The containment table: the hostile fixtures under each sandbox layer `auto` can pick on this machine.

    PYTHONPATH=. python tests/sandbox/hostile_table.py [--layers bwrap,landlock,none] [--verbose]

Per layer: host files written (fake HOME, working folder, workspace, system temp), TCP connections
and signals that reached this process, bytes of the planted secret in the store, in `sftbuild status
--dropped validate` and in the export, and exported rows holding a payload. Exits 1 when any is not 0
under a confining layer.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

COLUMNS = ("host_files_written", "connections", "signals", "secret_in_store", "secret_in_status", "secret_in_export",
           "payload_rows_exported")


def available(layer: str) -> str | None:
    """None when `layer` is what auto picks here once the layers it names are left out; else why not."""
    from sftbuild import sandbox
    from tests.sandbox.hostile import LAYERS

    if layer not in LAYERS:  # the control: nothing to detect
        return None
    os.environ[sandbox.WITHOUT_ENV] = LAYERS[layer][1]
    sandbox._probe.cache_clear()
    try:
        fs = sandbox.layers()["filesystem"]
        want = {"bwrap": "bubblewrap", "unshare+landlock": "(Landlock",
                "unshare+mounts": "(mount namespace)", "landlock": "(Landlock"}[layer]
        return None if want in fs else f"auto picks {fs} here"
    finally:
        os.environ.pop(sandbox.WITHOUT_ENV, None)
        sandbox._probe.cache_clear()


def main() -> int:
    from tests.sandbox import hostile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=",".join(hostile.LAYERS),
                    help="comma-separated, of " + ", ".join([*hostile.LAYERS, *hostile.CONTROL]) + " (the control: "
                    "no isolation, where the payloads reach the host; its exit code says so)")
    ap.add_argument("--verbose", action="store_true", help="print each layer's status output and stage log")
    args = ap.parse_args()
    os.environ.setdefault("SFTBUILD_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "sftbuild"))
    root = Path(tempfile.mkdtemp(prefix="sftbuild-hostile-"))
    listener = hostile.Listener()
    plan = hostile.prepare(root, listener.port)
    os.environ["HOME"] = str(root / "home")  # the planted secrets are this user's
    # what this process itself writes under HOME (matplotlib's font cache, for the dataset card's plots)
    os.environ["MPLCONFIGDIR"] = str(root / "mpl")
    os.environ["XDG_CACHE_HOME"] = str(root / "xdg-cache")
    print(hostile.harvest(plan).strip().splitlines()[-2:], f"in {root}")
    print("| layer | filesystem | " + " | ".join(COLUMNS) + " | records exported |")
    print("|" + "---|" * (len(COLUMNS) + 3))
    bad = 0
    for layer in args.layers.split(","):
        why = available(layer)
        if why:
            print(f"| {layer} | not available: {why} |")
            continue
        row = hostile.contain(plan, layer, listener)
        cells = [len(row[c]) if isinstance(row[c], list) else row[c] for c in COLUMNS]
        bad += sum(1 for c in cells if c) if layer in hostile.LAYERS else 0
        print(f"| {layer} | {row['filesystem']} | " + " | ".join(map(str, cells)) + f" | {row['records_exported']} |")
        if row["host_files_written"]:
            print("   written:", ", ".join(row["host_files_written"]))
        if args.verbose:
            print(row["log"], row["status"], sep="\n")
    listener.close()
    for name in os.listdir("/tmp"):  # what the control's payloads left in the system's temporary folder
        if plan.mark in name:
            os.unlink(os.path.join("/tmp", name))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
