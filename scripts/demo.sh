#!/usr/bin/env bash
# `make run`: start gpuyard on its defaults, submit the example training jobs, show them
# queue, run and complete, then keep the server in the foreground until Ctrl-C.
set -uo pipefail
cd "$(dirname "$0")/.."
url="${GPUYARD_URL:-http://127.0.0.1:8765}"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# The server's own log goes to a file, not between the jobs' output on this terminal.
log="${GPUYARD_SERVER_LOG:-$PWD/.venv/gpuyard-server.log}"

gpuyard server "$@" >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server; exit 0' INT TERM

# Until it answers (or exits): a loaded machine may take a while to start it.
until gpuyard queue >/dev/null 2>&1; do
  kill -0 $server 2>/dev/null || { cat "$log" >&2; wait $server; exit 1; }
  sleep 0.2
done
cat "$log"
echo "  its log:   $log (everything it says from now on)"

gpu_count=$(gpuyard gpus --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
gpu_flag=()
[ "$gpu_count" -gt 0 ] && gpu_flag=(--gpus 1)

say "submitting three example training jobs (examples/train_mlp.py, synthetic data)"
j1=$(gpuyard submit --name mlp-small "${gpu_flag[@]}" -- python examples/train_mlp.py --steps 1500 --hidden 128 --log-every 250)
j2=$(gpuyard submit --name mlp-wide "${gpu_flag[@]}" -- python examples/train_mlp.py --steps 1500 --hidden 512 --lr 5e-4 --log-every 250)
j3=$(gpuyard submit --name mlp-limited --time 5m "${gpu_flag[@]}" -- python examples/train_mlp.py --steps 1000 --log-every 250)
echo "jobs $j1 $j2 $j3"
sleep 0.5
say "gpuyard queue"
gpuyard queue
say "gpuyard logs -f $j1"
gpuyard logs -f "$j1"
gpuyard wait "$j1" "$j2" "$j3"
say "gpuyard logs $j3"
gpuyard logs "$j3"
say "gpuyard queue --all"
gpuyard queue --all
say "gpuyard server is running at $url (Ctrl-C stops it; its log: $log). In a new terminal, in this folder:"
echo '  JOB=$(.venv/bin/gpuyard submit --time 10m -- .venv/bin/python examples/train_mlp.py)'
echo "  .venv/bin/gpuyard queue"
echo '  .venv/bin/gpuyard logs -f $JOB'
wait $server
