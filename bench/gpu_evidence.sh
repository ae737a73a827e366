#!/usr/bin/env bash
# The GPU evidence the open issues ask for, in three parts that each fit one 10-minute device call on
# one H100/H200 (16 cores). Every part runs its pieces side by side and writes its logs under OUT.
#
#   bench/gpu_evidence.sh checks OUT   containment table per layer, red team, the GPU tests
#   bench/gpu_evidence.sh funnel OUT   the default run on ATen with its drops, the CUDA yield table
#   bench/gpu_evidence.sh rows   OUT   the Triton package rows and the reward's speed
#
# Carried beside the tree (all git-ignored): .whl/ (datasets, datasketch, tree-sitter), .whl-trainers/
# (TRL, verl, transformers), .whl-triton/ (liger, fla-core, conch, einops), fetched/ (the CUDA
# repositories at their pinned commits: bench/cuda_yield.sh's sources).
set -uo pipefail
part=${1:?checks, funnel or rows}; out=${2:?out dir}
cd "$(dirname "$0")/.."
mkdir -p "$out"
R=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl .whl-trainers/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/device.log"
git log -1 --format=%H >> "$out/device.log" 2>/dev/null
python3 -c "from sftbuild import sandbox; print(sandbox.layers()); print(*sandbox.unavailable(), sep='\n')" \
    >> "$out/device.log" 2>&1

case $part in
checks)
  (PYTHONPATH=$R:/tmp/site timeout 420 python3 tests/sandbox/hostile_table.py \
      --layers unshare+landlock,unshare+mounts,landlock,none > "$out/hostile.log" 2>&1
   echo "rc=$?" >> "$out/hostile.log") &
  (timeout 540 python3 -m pytest -m gpu -n 0 -q -rs -p no:cacheprovider \
      tests/validate/test_validate_redteam.py::test_redteam_on_gpu tests/validate/test_timing_integrity.py \
      > "$out/redteam.log" 2>&1; echo "rc=$?" >> "$out/redteam.log") &
  (timeout 540 python3 -m pytest -m gpu -n 0 -q -rs -p no:cacheprovider \
      tests/validate/test_host_launcher_gpu.py tests/validate/test_extension_function_gpu.py \
      tests/validate/test_candidate_kinds.py tests/validate/test_trainers.py tests/validate/test_reward_hostile_gpu.py \
      tests/sandbox/test_disk_fill.py tests/sandbox/test_sandbox_gpu.py tests/validate/test_validate_isolation.py \
      tests/core/test_trial_types.py > "$out/gpu_tests.log" 2>&1; echo "rc=$?" >> "$out/gpu_tests.log") &
  wait
  cat "$out/device.log"; tail -12 "$out/hostile.log"; tail -3 "$out/redteam.log"; tail -3 "$out/gpu_tests.log" ;;
funnel)
  (mkdir -p /tmp/aten && cd /tmp/aten && timeout 540 python3 -m sftbuild.cli run -q > "$out/run.log" 2>&1
   echo "rc=$?" >> "$out/run.log"
   { python3 -m sftbuild.cli status; python3 -m sftbuild.cli status --dropped validate; } >> "$out/run.log" 2>&1) &
  (timeout 560 bench/cuda_yield.sh "$out/yield" fetched/* > "$out/yield.log" 2>&1) &
  wait
  cat "$out/device.log"; grep -E "^  (bind|validate) |^blockers" "$out/run.log"; cat "$out/yield/table.md" ;;
rows)
  (cd /tmp && timeout 560 python3 "$R/bench/bench_reward.py" --completions 192 --batch 64 --compare \
      > "$out/reward.log" 2>&1; echo "rc=$?" >> "$out/reward.log") &
  (python3 -m pip install -q --no-deps --target /tmp/site .whl-triton/einops-*.whl >/dev/null 2>&1
   PROBE_WORKERS=8 PROBE_TIMEOUT=60 SECOND_NAME=conch SECOND_BIND_S=150 SECOND_VALIDATE_S=200 timeout 420 \
       bench/yield_table.sh "$out/conch" - - .whl-triton/conch_triton_kernels-*.whl > "$out/conch.log" 2>&1) &
  (LIGER_BIND_S=120 LIGER_VALIDATE_S=380 timeout 560 bench/yield_table.sh "$out/liger" - .whl-triton/liger_kernel-*.whl \
       > "$out/liger.log" 2>&1) &
  wait
  cat "$out/device.log"; tail -8 "$out/reward.log"; tail -4 "$out/conch.log" "$out/liger.log" ;;
*) echo "unknown part $part: checks, funnel or rows" >&2; exit 2 ;;
esac
