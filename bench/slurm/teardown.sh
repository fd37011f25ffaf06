#!/usr/bin/env bash
# Stop the Slurm daemons started by setup.sh.
#
#   bench/slurm/teardown.sh [DIR]     (DIR defaults to /tmp/gpuyard-slurm)
#
# Idempotent.  Asks slurmctld to shut everything down, then signals only the
# processes recorded in DIR/run/*.pid that are still alive.  Leaves DIR (logs,
# conf) in place; pass --purge as second argument to delete DIR as well.
set -uo pipefail

DIR="${1:-/tmp/gpuyard-slurm}"
PURGE="${2:-}"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

log() { echo "slurm-teardown: $*" >&2; }

if [ ! -d "$DIR" ]; then
    log "nothing to do ($DIR does not exist)"
    exit 0
fi
DIR="$(cd "$DIR" && pwd)"
CONF="$DIR/slurm.conf"
PIDS=("$DIR/run/slurmd.pid" "$DIR/run/slurmctld.pid")

pid_of() { [ -s "$1" ] && cat "$1"; }
# Alive = the recorded pid is a live (not zombie) slurm* process; guards
# against stale pidfiles and pid reuse.
alive() {
    local p st
    p="$(pid_of "$1")" && [ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 1
    [ -r "/proc/$p/stat" ] || return 0
    grep -q '^slurm' "/proc/$p/comm" 2>/dev/null || return 1
    st="$(sed -e 's/^.*) //' "/proc/$p/stat" | cut -d' ' -f1)"
    [ "$st" != Z ]
}

any_alive() {
    local f
    for f in "${PIDS[@]}"; do alive "$f" && return 0; done
    return 1
}

if any_alive; then
    # Graceful: `scontrol shutdown` stops slurmctld and all slurmd.
    if [ -f "$CONF" ] && command -v scontrol >/dev/null 2>&1; then
        SLURM_CONF="$CONF" timeout 10 scontrol shutdown >/dev/null 2>&1 || true
    fi
    for sig in TERM TERM KILL; do
        for _ in $(seq 1 50); do
            any_alive || break
            sleep 0.1
        done
        any_alive || break
        for f in "${PIDS[@]}"; do
            if alive "$f"; then
                log "sending SIG$sig to $(basename "$f" .pid) (pid $(pid_of "$f"))"
                kill "-$sig" "$(pid_of "$f")" 2>/dev/null || true
            fi
        done
    done
fi

if any_alive; then
    log "error: Slurm daemons still running"
    exit 1
fi
rm -f "${PIDS[@]}"
log "stopped"

if [ "$PURGE" = "--purge" ]; then
    rm -rf -- "$DIR"
    log "removed $DIR"
fi
