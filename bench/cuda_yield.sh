#!/usr/bin/env bash
# The CUDA yield table: each source folder through harvest, bind, describe and validate in a fresh
# workspace, then one row (records, compile, bound, ok, what stops the rest). On a GPU machine, from
# the repository root:
#
#   bench/cuda_yield.sh OUT_DIR SOURCE_DIR [SOURCE_DIR ...]
set -uo pipefail
out=${1:?out dir}; shift
mkdir -p "$out"
S="python3 -m sftbuild.cli"
echo "| source | records | compile | bound | ok | what stops the rest |" | tee "$out/table.md"
echo "| --- | --- | --- | --- | --- | --- |" | tee -a "$out/table.md"
for src in "$@"; do
  name=$(basename "$src"); w=/tmp/cuda-yield-$name
  rm -rf "$w"
  { $S harvest "$src" -w "$w" -q; $S bind -w "$w" -q; $S describe -w "$w" -q; $S validate -w "$w" -q; } \
    > "$out/$name.log" 2>&1
  $S bindings -w "$w" > "$out/$name-bindings.txt" 2>&1
  { $S status --dropped validate -w "$w"; $S status --dropped bind -w "$w"; } > "$out/$name-dropped.txt" 2>&1
  # the compile column: every record through the compile gate, bound or not (validate compiles bound ones only)
  python3 bench/cuda_compile.py "$w" --workers "${COMPILE_WORKERS:-8}" > "$out/$name-compile.txt" 2>&1
  python3 bench/cuda_yield_row.py "$w" "$name" "$out/$name-compile.txt" | tee -a "$out/table.md"
done
