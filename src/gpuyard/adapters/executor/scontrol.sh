#!/bin/sh
# scontrol for gpuyard jobs: `scontrol show hostnames [LIST]` (LIST: SLURM_JOB_NODELIST when
# not given), one host name a line, Slurm's bracket ranges (node[01-03,7]) expanded, answered
# here; every other verb (`requeue $SLURM_JOB_ID`, as submitit and Lightning call it at their
# time limit; `show job`, `hold`, `update`) is `gpuyard scontrol`'s, as the job's user: the
# `gpuyard` on the job's PATH, else an `scontrol` that `gpuyard slurm-commands install` wrote
# (never a real Slurm's, which knows no gpuyard job). Written by the gpuyard server beside its
# srun.
case "$1 $2" in
"show hostnames" | "show hostname")
	list=${3-${SLURM_JOB_NODELIST:-}}
	printf '%s\n' "$list" | awk '
	function emit(prefix, body, suffix,    parts, n, i, range, lo, hi, width, j) {
		n = split(body, parts, ",")
		for (i = 1; i <= n; i++) {
			if (split(parts[i], range, "-") == 2) {
				lo = range[1]; hi = range[2]; width = length(lo)
				for (j = lo + 0; j <= hi + 0; j++) printf "%s%0*d%s\n", prefix, width, j, suffix
			} else {
				print prefix parts[i] suffix
			}
		}
	}
	{
		text = $0; depth = 0; item = ""
		for (k = 1; k <= length(text) + 1; k++) {
			c = (k <= length(text)) ? substr(text, k, 1) : ","
			if (c == "[") depth++
			if (c == "]") depth--
			if (c == "," && depth == 0) {
				if (item != "") {
					if (match(item, /\[[^]]*\]/)) {
						emit(substr(item, 1, RSTART - 1), substr(item, RSTART + 1, RLENGTH - 2), substr(item, RSTART + RLENGTH))
					} else {
						print item
					}
				}
				item = ""
			} else {
				item = item c
			}
		}
	}'
	;;
*)
	here=$(dirname "$0")
	found=""
	IFS=:
	for dir in $PATH; do # gpuyard's CLI, else the scontrol its `slurm-commands install` wrote
		[ -n "$dir" ] && [ "$dir" != "$here" ] || continue
		if [ -x "$dir/gpuyard" ]; then
			found="$dir/gpuyard"
			break
		fi
	done
	if [ -z "$found" ]; then
		for dir in $PATH; do
			[ -n "$dir" ] && [ "$dir" != "$here" ] && [ -x "$dir/scontrol" ] || continue
			if grep -q "written by \`gpuyard slurm-commands install\`" "$dir/scontrol" 2>/dev/null; then
				found="$dir/scontrol"
				break
			fi
		done
	fi
	unset IFS
	if [ -z "$found" ]; then
		echo "scontrol (gpuyard): only 'scontrol show hostnames [LIST]' is here (no gpuyard on this job's PATH for '$1'); for the job itself: gpuyard show ${SLURM_JOB_ID:-ID}" >&2
		exit 1
	fi
	# The job's own requeue stops the job (SIGTERM to its every process) as soon as the server
	# has it: this command, still reading the answer, must not die of it (its caller, as
	# submitit's, reads a killed scontrol as a failed requeue). Slurm's scontrol has its answer
	# before slurmd signals the job.
	if [ "$1" = requeue ]; then trap '' TERM; fi
	case $found in
	*/gpuyard) exec "$found" scontrol "$@" ;;
	*) exec "$found" "$@" ;;
	esac
	;;
esac
