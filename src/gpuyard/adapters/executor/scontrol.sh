#!/bin/sh
# scontrol for gpuyard jobs: only what batch scripts ask of it, `scontrol show hostnames
# [LIST]` (LIST: SLURM_JOB_NODELIST when not given), one host name a line; Slurm's bracket
# ranges (node[01-03,7]) are expanded too. Written by the gpuyard server beside its srun.
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
	echo "scontrol (gpuyard): only 'scontrol show hostnames [LIST]' is here; for the job itself: gpuyard show ${SLURM_JOB_ID:-ID}" >&2
	exit 1
	;;
esac
