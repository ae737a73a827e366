#!/usr/bin/env bash
# The yield table of the README: each source through harvest, bind, describe and validate in a fresh
# workspace, then its funnel and bindings. Run on a GPU machine from the repository root:
#
#   bench/yield_table.sh OUT_DIR CUDA_REPO LIGER_WHEEL [SECOND_WHEEL]
#
# Each source has its own time limit (its bind and validate seconds, over bind, describe and validate
# together) so one slow source cannot starve the others; what the limit cuts short stays unbound or
# unvalidated and shows so in its funnel. The limits can be
# set per source (LLMC_BIND_S, LIGER_BIND_S, SECOND_BIND_S, and *_VALIDATE_S); a source given as "-"
# is left out, so each source can have a call of its own.
set -uo pipefail
out=${1:?out dir}; repo=${2:?cuda repo}; liger=${3:?liger wheel}; second=${4:-}
mkdir -p "$out"
S="python3 -m sftbuild.cli"
cfg=$(mktemp --suffix .yaml)
# probe workers per GPU and seconds per probe (FlagGems' row: PROBE_WORKERS=12 PROBE_TIMEOUT=60)
printf "bind:\n  probe_workers_per_gpu: %s\n  probe_timeout: %s\n" "${PROBE_WORKERS:-8}" "${PROBE_TIMEOUT:-120}" > "$cfg"
one() {  # name source bind_limit validate_limit
  local name=$1 src=$2 w=/tmp/yield-$1
  rm -rf "$w"
  local t0=$SECONDS
  $S harvest "$src" -w "$w" -q -c "$cfg" > "$out/$name.log" 2>&1
  # one limit over bind, describe and validate: a stage's command first finishes the stages before it
  # (describe binds what a cut bind left), so separate limits would leave that binding unlimited
  timeout "$(($3 + $4))" sh -c "$S bind -w '$w' -q -c '$cfg'; $S describe -w '$w' -q -c '$cfg'; \
    $S validate -w '$w' -q -c '$cfg'" >> "$out/$name.log" 2>&1
  echo "== $name ($((SECONDS - t0)) s)"
  $S status -w "$w" 2>&1 | sed -n '1,12p' | tee "$out/$name-status.txt"
  $S bindings -w "$w" > "$out/$name-bindings.txt" 2>&1
  # each source's drops and store as soon as it ends: a call cut short keeps what finished
  { $S status --dropped validate -w "$w"; $S status --dropped bind -w "$w"; } > "$out/$name-dropped.txt" 2>&1
  gzip -c "$w/sftbuild.db" > "$out/$name.db.gz"
  python3 bench/yield_row.py "$w" "$name" | tee -a "$out/table.md"
}
[ "$repo" != "-" ] && one llmc "$repo" "${LLMC_BIND_S:-200}" "${LLMC_VALIDATE_S:-200}"
# liger's bound records include grouped GEMMs and mHC kernels whose shapes are constexpr (a JIT
# compile per trial size): its validation needs about 400 s of a call of its own
[ "$liger" != "-" ] && one liger "$liger" "${LIGER_BIND_S:-120}" "${LIGER_VALIDATE_S:-400}"
# SECOND_NAME names the second source's row and files (a Triton package: SECOND_NAME=fla)
[ -n "$second" ] && [ "$second" != "-" ] && one "${SECOND_NAME:-second}" "$second" "${SECOND_BIND_S:-300}" \
  "${SECOND_VALIDATE_S:-220}"
rm -f "$cfg"
