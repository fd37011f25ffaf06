#!/usr/bin/env bash
# The tables of docs/scheduling.md: every policy at every point the targets name.
# Usage: scripts/scheduling_tables.sh [TRACES_DIR]   (default: ../shared/traces)
set -euo pipefail
cd "$(dirname "$0")/.."
traces="${1:-../shared/traces}"
all=fifo,backfill,fairshare,las,srtf-oracle,default
run() { echo "### $1 @ $2 GPUs"; echo; echo '```'; echo "\$ gpuyard simulate --trace $1 --gpus $2 --compare $all";
        .venv/bin/gpuyard simulate --trace "$traces/$1" --gpus "$2" --compare "$all"; echo '```'; echo; }
run philly_14237.csv 1024
run philly_14237.csv 1280
run philly_14237.csv 2048
run philly_vc_pass_82247.csv 768
# "With opt-in preemption": the preemptive policies with only a share of the jobs preemptible.
for gpus in 1024 1280; do
  for fraction in 1 0.75 0.5 0.25 0; do
    echo "\$ gpuyard simulate --trace philly_14237.csv --gpus $gpus --compare las,default --preemptible-fraction $fraction"
    .venv/bin/gpuyard simulate --trace "$traces/philly_14237.csv" --gpus "$gpus" --compare las,default \
      --preemptible-fraction "$fraction"
  done
done
