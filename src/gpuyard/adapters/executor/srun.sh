#!/bin/sh
# srun for gpuyard jobs: runs one step of the job, this node's tasks, each with its own
# SLURM_PROCID (node rank x tasks per node + local), SLURM_LOCALID, SLURM_NODEID and
# SLURM_STEP_ID, all on the job's GPUs (CUDA_VISIBLE_DEVICES as it is: Slurm's default), or
# with `--gpus-per-task G` (srun's, else the job's: SLURM_GPUS_PER_TASK) each task on its own G
# of them, as Slurm binds them: local task i gets the node's GPUs i*G .. i*G+G-1 (its
# CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, ROCR_VISIBLE_DEVICES and SLURM_STEP_GPUS name only
# those). `--gpu-bind` as Slurm's, its GPU numbers indices from 0 into the job's GPUs on the node
# (its mask: Slurm's with ConstrainDevices, as gpuyard's cgroups are), given to local tasks:
# none (every task all of them), per_task:N (as --gpus-per-task N), single:N (task i the GPU
# i/N, N tasks a GPU, cyclic), map_gpu:0,1*2 and mask_gpu:0x3,0xc (one entry a task, `*count`
# repeats it, cyclic), and closest: Slurm binds each task to the GPUs near its cores; gpuyard
# knows no NUMA affinity, so all GPUs are equally near, as Slurm makes them without gres.conf
# Cores: every task all of them. `verbose,` prints one line a task on stderr (gpuyard's own
# words, not Slurm's "gpu-bind: usable_gres=..."). Unlike Slurm, a step of one task is bound
# too. A GPU the job does not hold is one error line; nothing runs. SLURM_GPU_BIND (srun's input
# variable) is read as --gpu-bind.
# Their output goes where srun's goes (the job's log); `-l` prefixes each line with the
# task's rank. srun exits with the worst task's code (the first failure's, when it stopped
# the others: by default a failing task stops the rest of its step, `-K0` waits for them).
# Written by the gpuyard server (src/gpuyard/adapters/executor/srun.sh); POSIX sh only, so
# a job run as any user can run it. Options that place or bind tasks mean nothing here and
# are accepted silently; an unknown one is one warning line.
me="srun (gpuyard)"
die() { echo "$me: $*" >&2; exit 1; }
number() {
	case $2 in '' | *[!0-9]*) die "$1 takes a whole number, not '$2'" ;; esac
	[ "$2" -gt 0 ] || die "$1 must be at least 1"
}
ntasks='' per_node='' step_nodes='' label=0 kill_bad=1 chdir='' exports='' relay=1
per_task=${SLURM_GPUS_PER_TASK:-}
bind='' bind_list='' bind_verbose=0 bind_text='' # --gpu-bind: its type, list, verbose, as given
gpu_bind() {
	bind_text=$2$1 # $2: where it was given (--gpu-bind=, or srun's input variable)
	bind='' bind_list='' bind_verbose=0
	_value=$1
	case $_value in
	verbose) bind_verbose=1; return ;;
	verbose,*) bind_verbose=1; _value=${_value#verbose,} ;;
	esac
	case $_value in
	none | closest) bind=$_value ;;
	per_task:*) bind=per_task bind_list=${_value#*:} ;;
	single:*) bind=single bind_list=${_value#*:} ;;
	map_gpu:*) bind=map bind_list=${_value#*:} ;;
	mask_gpu:*) bind=mask bind_list=${_value#*:} ;;
	*) die "$bind_text: not a binding this srun knows; give none, closest, single:N, \
per_task:N, map_gpu:LIST or mask_gpu:LIST (optionally after verbose,)" ;;
	esac
}
# srun's input variable, as Slurm's srun reads it (an option given wins).
if [ -n "${SLURM_GPU_BIND:-}" ]; then gpu_bind "$SLURM_GPU_BIND" SLURM_GPU_BIND=; fi
while [ $# -gt 0 ]; do
	case $1 in
	--) shift; break ;;
	-n | --ntasks) [ $# -ge 2 ] || die "$1 needs a value"; ntasks=$2; shift ;;
	--ntasks=*) ntasks=${1#*=} ;;
	-n*) ntasks=${1#-n} ;;
	--ntasks-per-node) [ $# -ge 2 ] || die "$1 needs a value"; per_node=$2; shift ;;
	--ntasks-per-node=*) per_node=${1#*=} ;;
	-N | --nodes) [ $# -ge 2 ] || die "$1 needs a value"; step_nodes=$2; shift ;;
	--nodes=*) step_nodes=${1#*=} ;;
	-N*) step_nodes=${1#-N} ;;
	-l | --label) label=1 ;;
	-K | -K1 | --kill-on-bad-exit | --kill-on-bad-exit=1) kill_bad=1 ;;
	-K0 | --kill-on-bad-exit=0) kill_bad=0 ;;
	-D | --chdir) [ $# -ge 2 ] || die "$1 needs a value"; chdir=$2; shift ;;
	--chdir=*) chdir=${1#*=} ;;
	--export) [ $# -ge 2 ] || die "$1 needs a value"; exports=$2; shift ;;
	--export=*) exports=${1#*=} ;;
	--gpus-per-task) [ $# -ge 2 ] || die "$1 needs a value"; per_task=$2; shift ;;
	--gpus-per-task=*) per_task=${1#*=} ;;
	--gpu-bind) [ $# -ge 2 ] || die "$1 needs a value"; gpu_bind "$2" --gpu-bind=; shift ;;
	--gpu-bind=*) gpu_bind "${1#*=}" --gpu-bind= ;;
	-c | -G | -t | -J | -p | -w | -m | -o | -e | -i | -A | -q | --cpus-per-task | --cpu-bind | \
		--cpu_bind | --gpus | --gres | --gpus-per-node | \
		--cpus-per-gpu | --mpi | --mem | --mem-per-cpu | --mem-per-gpu | --time | --job-name | \
		--partition | --nodelist | --distribution | --jobid | --output | --error | --input | \
		--account | --qos | --signal | --constraint | --exclude | --ntasks-per-gpu)
		[ $# -ge 2 ] || die "$1 needs a value"; shift ;;
	-u | --unbuffered) relay=0 ;;
	--pty | --overlap | --exclusive | --exact | --whole | -v | --verbose | \
		-Q | --quiet | -X | --disable-status | -O | --overcommit | --wait | --cpu-bind* | \
		--*=* | -c* | -G* | -t* | -J* | -p* | -w* | -m* | -o* | -e* | -i* | -A* | -q*) ;;
	-*) echo "$me: ignoring the option $1 (not one gpuyard's srun knows)" >&2 ;;
	*) break ;;
	esac
	shift
done
[ $# -gt 0 ] || die "no command to run (srun [options] command [arguments...])"
per_task=${per_task##*:} # TYPE:N: N
# An explicit --gpu-bind wins over --gpus-per-task (its default: per_task:G), as Slurm's.
case $bind in
none | closest) per_task='' ;;
per_task) per_task=$bind_list; number "--gpu-bind=per_task:N" "$per_task" ;;
single) per_task=''; number "--gpu-bind=single:N" "$bind_list" ;;
map | mask) per_task='' ;;
esac
for value in "$ntasks:-n" "$per_node:--ntasks-per-node" "$step_nodes:-N" "$per_task:--gpus-per-task"; do
	[ -z "${value%%:*}" ] || number "${value#*:}" "${value%%:*}"
done

nnodes=${SLURM_JOB_NUM_NODES:-1}
node=${SLURM_NODEID:-0}
if [ -z "$step_nodes" ] || [ "$step_nodes" -gt "$nnodes" ]; then step_nodes=$nnodes; fi
if [ -n "$per_node" ]; then
	total=${ntasks:-$((per_node * step_nodes))}
elif [ -n "$ntasks" ]; then
	total=$ntasks
	per_node=$(((ntasks + step_nodes - 1) / step_nodes))
else
	per_node=${GPUYARD_NTASKS_PER_NODE:-1}
	total=$((per_node * step_nodes))
fi
first=$((node * per_node))
count=$((total - first))
[ "$count" -le "$per_node" ] || count=$per_node
# This node has no task in the step (fewer tasks than nodes): nothing to run here.
if [ "$node" -ge "$step_nodes" ] || [ "$count" -le 0 ]; then exit 0; fi

# The fields $2 .. $2+$3-1 (from 0) of the comma-separated list $1.
fields() {
	_out='' _at=0 _ifs=$IFS
	IFS=,
	for _field in $1; do
		if [ "$_at" -ge "$2" ] && [ "$_at" -lt $(($2 + $3)) ]; then _out=${_out:+$_out,}$_field; fi
		_at=$((_at + 1))
	done
	IFS=$_ifs
	echo "$_out"
}
# The node's GPUs, as the job's mask names them (CUDA's, or ROCm's on AMD GPUs).
mask=${ROCR_VISIBLE_DEVICES:-${CUDA_VISIBLE_DEVICES:-}}
# The fields of the comma-separated list $1 at the positions (from 0) of the list $2, in order.
pick() {
	_picked='' _ifs=$IFS
	IFS=,
	for _want in $2; do
		_at=0
		for _field in $1; do
			if [ "$_at" -eq "$_want" ]; then _picked=${_picked:+$_picked,}$_field; fi
			_at=$((_at + 1))
		done
	done
	IFS=$_ifs
	echo "$_picked"
}
have=0
if [ -n "$mask" ]; then have=$(($(echo "$mask" | tr -cd , | wc -c) + 1)); fi
if [ -n "$per_task" ]; then
	[ $((count * per_task)) -le "$have" ] || die "$count tasks x $per_task GPUs per task \
need $((count * per_task)) GPUs; this node has $have of the job's: run fewer tasks (-n) or fewer \
GPUs per task (--gpus-per-task), or submit the job with more GPUs"
fi
if [ -n "$bind_list" ] && [ "$have" -eq 0 ]; then
	die "$bind_text: the job has no GPUs on this node; submit it with GPUs"
fi
not_held() {
	[ "$have" -gt 0 ] || die "$bind_text: the job has no GPUs on this node"
	die "$bind_text: $1; this node has $have of the job's GPUs, numbered 0 to \
$((have - 1)) (indices into CUDA_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES): name only those"
}
# map_gpu's and mask_gpu's list, `X*count` spelled out: one comma-separated entry a task, each
# the positions (from 0, among the job's GPUs) of its GPUs, joined by `+`.
bind_entries=''
if [ "$bind" = map ] || [ "$bind" = mask ]; then
	_ifs=$IFS
	IFS=,
	for _item in $bind_list; do
		_times=1 _id=$_item
		case $_item in *\**) _id=${_item%%\**} _times=${_item#*\*} ;; esac
		case $_times in '' | *[!0-9]*) not_held "'$_item' repeats a GPU by a whole number (ID*N)" ;; esac
		if [ "$bind" = map ]; then
			case $_id in
			0x* | 0X*) case ${_id#0?} in '' | *[!0-9a-fA-F]*) not_held "'$_id' is no GPU number" ;; esac
				_id=$((_id)) ;;
			'' | *[!0-9]*) not_held "'$_id' is no GPU number" ;;
			*) while case $_id in 0?*) true ;; *) false ;; esac; do _id=${_id#0}; done ;;
			esac
			[ "$_id" -lt "$have" ] || not_held "GPU $_id is not the job's"
			_gpus=$_id
		else
			_hex=${_id#0[xX]}
			case $_hex in '' | *[!0-9a-fA-F]*) not_held "'$_id' is no hex GPU mask" ;; esac
			_bits=$((0x$_hex)) _gpus='' _bit=0
			[ "$_bits" -gt 0 ] || not_held "the mask '$_id' names no GPU"
			while [ "$_bits" -gt 0 ]; do
				if [ $((_bits % 2)) -eq 1 ]; then
					[ "$_bit" -lt "$have" ] || not_held "the mask '$_id' names GPU $_bit, not the job's"
					_gpus=${_gpus:+$_gpus+}$_bit
				fi
				_bits=$((_bits / 2)) _bit=$((_bit + 1))
			done
		fi
		while [ "$_times" -gt 0 ]; do
			bind_entries=${bind_entries:+$bind_entries,}$_gpus
			_times=$((_times - 1))
		done
	done
	IFS=$_ifs
	[ -n "$bind_entries" ] || not_held "no GPU named"
fi
# Local task $1's GPUs, as positions (from 0) among the job's on this node; empty: all of them.
task_gpus() {
	if [ -n "$per_task" ]; then
		_p=$(($1 * per_task)) _end=$(($1 * per_task + per_task)) _out=''
		while [ "$_p" -lt "$_end" ]; do _out=${_out:+$_out,}$_p; _p=$((_p + 1)); done
		echo "$_out"
	elif [ "$bind" = single ]; then
		echo $((($1 / bind_list) % have))
	elif [ -n "$bind_entries" ]; then
		_n=$(($(echo "$bind_entries" | tr -cd , | wc -c) + 1))
		fields "$bind_entries" $(($1 % _n)) 1 | tr + ,
	fi
}
# Local task $1's own GPUs (--gpus-per-task, --gpu-bind): its masks name only them.
bind_gpus() {
	_mine=$(task_gpus "$1")
	if [ -n "$_mine" ]; then
		_k=$(($(echo "$_mine" | tr -cd , | wc -c) + 1))
		if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
			CUDA_VISIBLE_DEVICES=$(pick "$CUDA_VISIBLE_DEVICES" "$_mine")
			# Slurm's gres/gpu: GPU_DEVICE_ORDINAL beside CUDA's, the same list (not on AMD GPUs,
			# where gpuyard leaves it unset: it would index into ROCR's mask again).
			if [ -n "${GPU_DEVICE_ORDINAL:-}" ]; then GPU_DEVICE_ORDINAL=$CUDA_VISIBLE_DEVICES; fi
		fi
		if [ -n "${ROCR_VISIBLE_DEVICES:-}" ]; then
			ROCR_VISIBLE_DEVICES=$(pick "$ROCR_VISIBLE_DEVICES" "$_mine")
			# HIP's mask (set only beside NVIDIA GPUs) indexes into ROCR's: all of what is left.
			if [ -n "${HIP_VISIBLE_DEVICES:-}" ]; then
				HIP_VISIBLE_DEVICES=$(fields "$HIP_VISIBLE_DEVICES" 0 "$_k")
			fi
		fi
		# The job's GPU numbers (one node's: a step on several nodes keeps the job's list).
		if [ "$nnodes" -le 1 ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
			SLURM_STEP_GPUS=$(pick "$SLURM_JOB_GPUS" "$_mine")
		fi
		export CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES SLURM_STEP_GPUS \
			GPU_DEVICE_ORDINAL
	fi
	if [ "$bind_verbose" -eq 1 ]; then
		echo "$me: gpu-bind: task $SLURM_PROCID (local $1) on the job's GPUs \
${_mine:-all}: ${ROCR_VISIBLE_DEVICES:+ROCR_VISIBLE_DEVICES=$ROCR_VISIBLE_DEVICES }\
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" >&2
	fi
}

# The step's number: one folder per step, made atomically (steps may start side by side).
umask 077
steps=${TMPDIR:-/tmp}/gpuyard-srun.${SLURM_JOB_ID:-0}.${GPUYARD_LAUNCH_ID:-$$}
mkdir "$steps" 2>/dev/null
if [ -d "$steps" ] && [ -O "$steps" ] && [ ! -L "$steps" ]; then
	# Counted from the last step's number (a hint: steps started side by side may pass it).
	step=$(cat "$steps/last" 2>/dev/null) || step=0
	case $step in '' | *[!0-9]*) step=0 ;; esac
	while ! mkdir "$steps/$step" 2>/dev/null; do
		step=$((step + 1))
		[ "$step" -lt 100000 ] || die "cannot number this step in $steps"
	done
	echo "$step" >"$steps/last.$$" && mv -f "$steps/last.$$" "$steps/last"
	dir=$steps/$step # kept (emptied) at the end: it holds the step's number
	temporary=0
else
	step=0
	dir=$(mktemp -d) || die "no folder for the step's bookkeeping"
	temporary=1
fi
finish() {
	if [ "$temporary" -eq 1 ]; then rm -rf "$dir"; else rm -rf "$dir"/*; fi
}
# The step's record for sacct's JOBID.N rows (GPUYARD_STEPS_DIR: the job's folder of them,
# read by the server with the job's end; step_records.py): one line, "N NTASKS START END CODE
# NAME", END and CODE "-" until it ends, written whole (a temporary file, then mv). Node 0's
# only (its tasks are counted for the whole step), the first 1000 steps only.
record_to=''
if [ -n "${GPUYARD_STEPS_DIR:-}" ] && [ -d "$GPUYARD_STEPS_DIR" ] && [ "$node" -eq 0 ] &&
	[ "$step" -lt 1000 ]; then
	record_to=$GPUYARD_STEPS_DIR/$step
	began=$(date +%s)
	name=${1##*/}
fi
record() { # END CODE
	[ -n "$record_to" ] || return 0
	printf '%s %s %s %s %s %s\n' "$step" "$total" "$began" "$1" "$2" "$name" \
		>"$GPUYARD_STEPS_DIR/.$step.$$" 2>/dev/null &&
		mv -f "$GPUYARD_STEPS_DIR/.$step.$$" "$record_to" 2>/dev/null
}
record - -

if [ -n "$chdir" ]; then cd "$chdir" || die "cannot enter $chdir"; fi
old_ifs=$IFS
IFS=,
for item in $exports; do
	case $item in *=*) export "$item" ;; esac # ALL, NONE and names: the job's as they are
done
IFS=$old_ifs

export SLURM_STEP_ID="$step" SLURM_STEPID="$step" SLURM_NTASKS="$total" SLURM_NPROCS="$total" \
	SLURM_NTASKS_PER_NODE="$per_node" SLURM_STEP_NUM_TASKS="$total" \
	SLURM_STEP_NUM_NODES="$step_nodes" SLURM_NODEID="$node" \
	SLURM_STEP_NODELIST="${SLURM_JOB_NODELIST:-}" SLURM_STEP_GPUS="${SLURM_JOB_GPUS:-}"
if [ "$step_nodes" -gt 1 ]; then
	export SLURM_TASKS_PER_NODE="$per_node(x$step_nodes)" SLURM_STEP_TASKS_PER_NODE="$per_node(x$step_nodes)"
else
	export SLURM_TASKS_PER_NODE="$per_node" SLURM_STEP_TASKS_PER_NODE="$per_node"
fi
# Where rank 0 listens (torch.distributed's env://, Lightning): the job's own port when it
# has one (several tasks, or several nodes); else one derived from the job's id.
if [ "$nnodes" -le 1 ]; then export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"; fi
export MASTER_PORT="${MASTER_PORT:-$((15000 + ${SLURM_JOB_ID:-0} % 20000))}"

# One task, unlabelled: it is srun's own process (signals, the terminal, stdin as they are).
if [ "$count" -eq 1 ] && [ "$label" -eq 0 ]; then
	finish
	export SLURM_PROCID="$first" SLURM_LOCALID=0
	bind_gpus 0
	[ -n "$record_to" ] || exec "$@"
	# Recorded: srun waits for its task to say how the step ended. The task keeps srun's
	# group, the terminal and stdin; the job's signals reach it (gpuyard signals every process
	# of the job) and srun outlives them (a trap, not an ignore: the task keeps the defaults).
	# `command`: a command named like one of srun's functions is still the command.
	trap ':' TERM INT HUP USR1 USR2 QUIT
	command "$@"
	code=$?
	record "$(date +%s)" "$code"
	exit "$code"
fi

# Each task in a process group of its own where `setsid` is there (util-linux), so that its
# whole tree can be stopped, and what it leaves behind ended with it (Slurm ends a step's
# stragglers too): they would hold its output open. The job's supervisor still reaches them
# (it signals every process below the job, in whatever group).
if command -v setsid >/dev/null 2>&1; then group=-; else group=''; fi
task_tree() { # signal $1 to task pid $2: its group, else the task
	kill "-$1" "$group$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null
}
# A failing task's waiter stops the others (kill-on-bad-exit) by the pids they wrote; a task
# whose pid is written after the failure sees the mark and stops itself: either way none runs on.
stop_all() {
	for file in "$dir"/pid.*; do
		[ -f "$file" ] && task_tree TERM "$(cat "$file")"
	done
}
# Ctrl-C at a terminal reaches srun (in the job's group): passed on to every task, as Slurm's
# srun does.
trap 'for file in "$dir"/pid.*; do [ -f "$file" ] && task_tree INT "$(cat "$file")"; done' INT
# The signals a job gets (its stop signal, `--signal`'s warning, a terminal's) are for the tasks,
# which have their own handlers: srun, the waiters and the readers outlive them, so a task's
# last lines (a checkpoint saved on SIGTERM) still reach the log and its exit code srun.
quiet='TERM INT HUP USR1 USR2 QUIT'
# The line readers: mawk (Debian's awk) waits for a full buffer from a pipe unless interactive.
reader=awk
if awk -W version 2>/dev/null | grep -q mawk; then reader='awk -W interactive'; fi
trap ':' TERM USR1 USR2 # srun waits for its tasks; they get the job's signals from gpuyard
exec 3<&0
host=${SLURMD_NODENAME:-$(uname -n)}
i=0
pids=''
while [ "$i" -lt "$count" ]; do
	rank=$((first + i))
	(
		export SLURM_PROCID="$rank" SLURM_LOCALID="$i"
		bind_gpus "$i"
		trap - TERM USR1 USR2
		# stdin goes to task 0 (Slurm's default for a step's input), the others read nothing.
		if [ "$rank" -ne 0 ]; then exec 3</dev/null; fi
		# Each task's lines whole (as Slurm's srun relays them): its stdout through a reader,
		# one write a line, so lines of different tasks never mix mid-line (a Python run with
		# PYTHONUNBUFFERED writes a print in pieces); its stderr as it is (tracebacks and log
		# records come whole, progress bars' \r updates stay live); `-l`: both through readers,
		# each line prefixed with the rank; `-u` without `-l`: stdout as written too.
		out=/dev/stdout err=/dev/stderr
		if [ "$relay" -eq 1 ] || [ "$label" -eq 1 ]; then
			prefix=''
			if [ "$label" -eq 1 ]; then prefix="$rank: "; fi
			out=$dir/out.$rank
			mkfifo "$out" || exit 1
			# shellcheck disable=SC2086
			(trap '' $quiet; exec $reader -v p="$prefix" '{ printf "%s", p $0 "\n"; fflush() }') <"$out" &
			if [ "$label" -eq 1 ]; then
				err=$dir/err.$rank
				mkfifo "$err" || exit 1
				# shellcheck disable=SC2086
				(trap '' $quiet; exec $reader -v p="$prefix" '{ printf "%s", p $0 "\n" > "/dev/stderr"; fflush("/dev/stderr") }') <"$err" &
			fi
		fi
		if [ "$out" = /dev/stdout ] && [ "$err" = /dev/stderr ]; then
			(if [ -n "$group" ]; then exec setsid "$@"; else exec "$@"; fi) <&3 &
		elif [ "$err" = /dev/stderr ]; then
			(if [ -n "$group" ]; then exec setsid "$@"; else exec "$@"; fi) <&3 >"$out" &
		else
			(if [ -n "$group" ]; then exec setsid "$@"; else exec "$@"; fi) <&3 >"$out" 2>"$err" &
		fi
		task=$!
		# shellcheck disable=SC2086
		trap '' $quiet
		echo "$task" >"$dir/pid.$rank"
		if [ -d "$dir/failed" ]; then task_tree TERM "$task"; fi
		wait "$task" 2>/dev/null # (not dash's "Terminated": the lines below say it)
		code=$?
		echo "$code" >"$dir/code.$rank"
		if [ -n "$group" ]; then kill -KILL "-$task" 2>/dev/null; fi # its stragglers
		wait # the readers, once the task's output is all out
		if [ "$code" -ne 0 ] && [ ! -d "$dir/failed" ]; then
			echo "srun: error: $host: task $rank: Exited with exit code $code" >&2
			if [ "$kill_bad" -eq 1 ] && mkdir "$dir/failed" 2>/dev/null; then
				echo "$code" >"$dir/failed/code"
				echo "srun: error: task $rank failed: stopping the step's other tasks (-K0: let them run)" >&2
				stop_all
			fi
		fi
		exit "$code"
	) &
	pids="$pids $!"
	i=$((i + 1))
done
exec 3<&-
for pid in $pids; do
	while :; do
		wait "$pid"
		status=$?
		# A signal srun outlives (above) interrupts the wait with a status above 128.
		if [ "$status" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi
		break
	done
done
worst=0
if [ -f "$dir/failed/code" ]; then
	worst=$(cat "$dir/failed/code")
else
	i=0
	while [ "$i" -lt "$count" ]; do
		code=$(cat "$dir/code.$((first + i))" 2>/dev/null || echo 1)
		[ "$code" -le "$worst" ] || worst=$code
		i=$((i + 1))
	done
fi
finish
record "$(date +%s)" "$worst"
exit "$worst"
