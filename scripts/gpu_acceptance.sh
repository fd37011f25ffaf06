#!/usr/bin/env bash
# GPU acceptance: what only a real GPU machine can show, NVIDIA or AMD (the vendor is read from
# what the server detected; a machine with both runs the checks on each). Run it on one (a
# device session), from the repository root after `make test` built .venv, and record its
# output in docs/.
#
#   scripts/gpu_acceptance.sh            # prints PASS/FAIL per check, exits 1 on any FAIL
#
# Checks (each against the real driver through nvidia-ml-py or amdsmi, a real CUDA or ROCm
# torch when installed; on ROCm, torch.cuda is HIP and "nccl" is RCCL, so the same jobs run):
#  1. `gpuyard doctor --json`: driver and GPUs found, no FAIL.
#  2. the server detects the GPUs (`--gpus auto`), `gpuyard gpus --json` carries live telemetry.
#  3. examples/train_mlp.py on 1 GPU completes, trains on cuda, and `show` has its GPU stats.
#  4. examples/train_ddp.py with --distributed torchrun on 2 GPUs (NCCL) completes (skipped
#     with one GPU).
#  5. a job that allocates more GPU memory than the GPU has ends OUT_OF_MEMORY.
#  6. `/metrics` carries DCGM_FI_DEV_GPU_UTIL for every NVIDIA GPU, gpu_gfx_activity (AMD's
#     device-metrics-exporter name) for every AMD one.
#  7. GPU sharing: two `--gpu-mem 20G` PyTorch jobs run on one GPU at once, capped (the startup
#     hook); one that allocates past its --gpu-mem gets PyTorch's own OOM (soft cap) and ends
#     OUT_OF_MEMORY while its neighbour keeps running; one that lifts its own cap and goes over
#     is stopped by the server (hard limit, GpuMemLimit).
#  8. isolation: a 1-GPU job's torch sees exactly one device (CUDA_VISIBLE_DEVICES on NVIDIA,
#     ROCR_VISIBLE_DEVICES on AMD); on a machine with both, `--gpu-type amd` and
#     `--gpu-type nvidia` jobs land on GPUs of that vendor.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
state=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export GPUYARD_URL="http://127.0.0.1:$port" GPUYARD_STATE_DIR="$state" GPUYARD_TELEMETRY_S=0.5
failed=0
check() { if [ "$2" = 0 ]; then echo "PASS  $1"; else echo "FAIL  $1${3:+: $3}"; failed=1; fi; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "== machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1
fi
if command -v amd-smi >/dev/null; then amd-smi static --asic --driver 2>&1 | head -40; fi
echo "== gpuyard doctor"
gpuyard doctor; doctor_rc=$?
check "doctor reports no FAIL" "$doctor_rc"

gpuyard server --port "$port" --state-dir "$state" >"$state/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 1 100); do gpuyard queue >/dev/null 2>&1 && break; sleep 0.2; done

gpus=$(gpuyard gpus --json)
count=$(echo "$gpus" | field 'sum(1 for g in d if g["detected"])')
check "server detected the GPUs (--gpus auto): $count" "$([ "$count" -gt 0 ]; echo $?)"
if [ "$count" -eq 0 ]; then
  echo "no NVIDIA or AMD GPU detected: the remaining checks need one (this is for a GPU machine)"
  exit 1
fi
vendors=$(echo "$gpus" | field '" ".join(sorted({g["vendor"] for g in d if g["detected"]}))')
echo "vendors: $vendors"
sleep 2
util=$(gpuyard gpus --json | field 'all(g["util_pct"] is not None for g in d)')
check "live telemetry on every GPU" "$([ "$util" = True ]; echo $?)"
gpuyard gpus

echo "== one GPU: examples/train_mlp.py"
job=$(gpuyard submit --gpus 1 --name accept-mlp -- python examples/train_mlp.py --steps 3000 --hidden 1024)
gpuyard wait "$job"; rc=$?
check "train_mlp.py completed" "$rc" "$(gpuyard show "$job" | grep Reason)"
gpuyard logs "$job" | head -1
check "it trained on cuda" "$(gpuyard logs "$job" | grep -q 'training on cuda'; echo $?)"
stats=$(gpuyard show "$job" --json | field 'd["gpu_stats"]')
echo "gpu_stats: $stats"
check "show has its GPU stats" "$([ "$stats" != None ]; echo $?)"

if [ "$count" -ge 2 ]; then
  echo "== two GPUs: examples/train_ddp.py through torchrun (NCCL)"
  job=$(gpuyard submit --gpus 2 --distributed torchrun --name accept-ddp -- python examples/train_ddp.py --steps 300)
  gpuyard wait "$job"; rc=$?
  gpuyard logs "$job" | grep -E 'rank|done' | head -4
  check "train_ddp.py on 2 GPUs completed" "$rc" "$(gpuyard show "$job" | grep Reason)"
else
  echo "SKIP  two-GPU DDP: one GPU here"
fi

echo "== isolation: a 1-GPU job sees one device"
for vendor in $vendors; do
  job=$(gpuyard submit --gpus 1 --gpu-type "$vendor" --name "accept-iso-$vendor" -- python -c \
    'import os, torch; print("masks", os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("ROCR_VISIBLE_DEVICES"), "devices", torch.cuda.device_count())')
  gpuyard wait "$job"
  seen=$(gpuyard logs "$job" | grep '^masks')
  echo "$vendor: $seen (on GPU $(gpuyard show "$job" --json | field 'd["gpus"]'))"
  check "a 1-GPU job on $vendor sees exactly one device" "$(echo "$seen" | grep -q 'devices 1$'; echo $?)"
  on=$(gpuyard show "$job" --json | field 'd["gpus"][0]')
  got=$(echo "$gpus" | field "[g['vendor'] for g in d if g['index'] == $on][0]")
  check "--gpu-type $vendor placed it on a $vendor GPU (got $got)" "$([ "$got" = "$vendor" ]; echo $?)"
done

echo "== out of memory"
job=$(gpuyard submit --gpus 1 --name accept-oom -- python -c \
  'import torch; x = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(100000)]')
gpuyard wait "$job"
state_now=$(gpuyard show "$job" --json | field 'd["state"]')
check "a job exceeding the GPU's memory ends OUT_OF_MEMORY (got $state_now)" \
  "$([ "$state_now" = OUT_OF_MEMORY ]; echo $?)" "$(gpuyard show "$job" | grep Reason)"

echo "== sharing one GPU by memory (--gpu-mem)"
cat >"$state/hold.py" <<'PY'
"""Allocate GIB GiB on the GPU, hold it SECONDS s; --uncap lifts gpuyard's allocator cap."""
import os, sys, time
import torch
gib, seconds = float(sys.argv[1]), float(sys.argv[2])
torch.zeros(1, device="cuda")  # CUDA initialises: the startup hook applies the cap here
print("cap applied:", os.environ.get("GPUYARD_GPU_MEM_CAP_APPLIED"), flush=True)
if "--uncap" in sys.argv:
    torch.cuda.set_per_process_memory_fraction(1.0)
x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
print(f"holding {gib} GiB", flush=True)
time.sleep(seconds)
PY
a=$(gpuyard submit --gpu-mem 20G --name accept-share-a -- python "$state/hold.py" 8 40)
b=$(gpuyard submit --gpu-mem 20G --name accept-share-b -- python "$state/hold.py" 8 40)
for _ in $(seq 1 100); do
  [ "$(gpuyard show "$b" --json | field 'd["state"]')" = RUNNING ] && break; sleep 0.3
done
sleep 5
gpuyard gpus
together=$(gpuyard gpus --json | field "any(set(g['jobs']) == {$a, $b} for g in d)")
check "two --gpu-mem 20G jobs share one GPU" "$([ "$together" = True ]; echo $?)"
check "their allocator is capped" "$(gpuyard logs "$a" | grep -q 'cap applied: 0\.'; echo $?)" \
  "$(gpuyard logs "$a" | head -3)"
over=$(gpuyard submit --gpu-mem 8G --name accept-share-over -- python "$state/hold.py" 12 30)
gpuyard wait "$over"
state_now=$(gpuyard show "$over" --json | field 'd["state"]')
check "over its --gpu-mem: PyTorch's own OOM, OUT_OF_MEMORY (got $state_now)" \
  "$([ "$state_now" = OUT_OF_MEMORY ]; echo $?)" "$(gpuyard show "$over" | grep Reason)"
gpuyard show "$over" | grep Reason
uncapped=$(gpuyard submit --gpu-mem 8G --name accept-share-uncap -- python "$state/hold.py" 12 60 --uncap)
gpuyard wait "$uncapped"
reason=$(gpuyard show "$uncapped" --json | field 'd["state"] + " " + d["reason"]')
echo "$reason"
check "over its --gpu-mem without the cap: stopped by the server" \
  "$(echo "$reason" | grep -q '^OUT_OF_MEMORY GpuMemLimit'; echo $?)"
neighbour=$(gpuyard show "$a" --json | field 'd["state"]')
check "the neighbour kept running meanwhile (got $neighbour)" \
  "$(echo "$neighbour" | grep -qE 'RUNNING|COMPLETED'; echo $?)"
gpuyard wait "$a"; gpuyard wait "$b"

echo "== /metrics"
token=$(cat "$state/token")
metrics=$(curl -s -H "Authorization: Bearer $token" "$GPUYARD_URL/metrics")
nv=$(echo "$gpus" | field 'sum(1 for g in d if g["detected"] and g["vendor"] != "amd")')
amd=$(echo "$gpus" | field 'sum(1 for g in d if g["detected"] and g["vendor"] == "amd")')
lines=$(echo "$metrics" | grep -c '^DCGM_FI_DEV_GPU_UTIL{')
check "DCGM_FI_DEV_GPU_UTIL for every NVIDIA GPU ($lines of $nv)" "$([ "$lines" -eq "$nv" ]; echo $?)"
lines=$(echo "$metrics" | grep -c '^gpu_gfx_activity{')
check "gpu_gfx_activity for every AMD GPU ($lines of $amd)" "$([ "$lines" -eq "$amd" ]; echo $?)"

echo
if [ "$failed" = 0 ]; then
  echo "ALL PASSED"
else
  echo "SOME CHECKS FAILED; the server's log ends with:"
  tail -20 "$state/server.log"
fi
exit "$failed"
