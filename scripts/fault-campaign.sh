#!/usr/bin/env bash
# shellcheck disable=SC2046,SC2086,SC2128  # pid lists are split into words on purpose
# Fault campaign (issue 13 item 8): real `tightpipe train` runs of a tiny model, each hit by one
# fault at a random time, then checked:
#   kill-rank  kill -9 one random MPI rank (mpirun, with and without --enable-recovery by turns)
#   stop-rank  SIGSTOP one random MPI rank; the others must end with an error within
#              --pipeline-timeout; the campaign then kills the stopped one
#   kill-save  SIGKILL every process of the run while a save is in flight (the first .tmp file
#              seen after a random delay), threads and MPI by turns
#   disk-full  the --save directory is a size-limited tmpfs, filled up at a random time so that
#              the next save runs out of space, threads and MPI by turns
# After each: did the run end with a clean error (non-zero exit, an error line, within the time
# limit; not asked of kill-save, which kills everything), was any process left running (orphans,
# found by session id), does the newest complete checkpoint load (`train --load SAVE_ROOT` prints
# "loaded ... at step N"), and how many steps were lost: the last step whose save completed
# ("saved ... at step N") against the step resumed from. A save in flight may be lost, a
# completed one may not.
#
# Exit status: 0 when every trial ended cleanly, left no orphan and lost no checkpoint; 1
# otherwise; 77 (ctest: skipped) when all that ran passed but some trials could not run (no
# mpirun, no way to mount a tmpfs), counted and named separately, never passed silently.
#
#   scripts/fault-campaign.sh                      # CI size: 2 trials per kind
#   scripts/fault-campaign.sh -n 20 --seed 7       # bigger local run (FAULT_N=20 works too)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() {
  sed -n '3,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  cat <<'EOF'
flags:
  -n N              trials per kind (default $FAULT_N or 2)
  --kinds LIST      comma-separated subset of kill-rank,stop-rank,kill-save,disk-full
  --seed S          seed of the random choices (default $FAULT_SEED or the time)
  --build DIR       build directory holding tools/tightpipe/tightpipe (default build)
  --data FILE       training text (default ../shared/data/tinyshakespeare.txt)
  --work DIR        scratch directory (default a new one under ${TMPDIR:-/tmp}, removed at the end)
  --keep            keep the scratch directory (logs of every run)
  --timeout S       --pipeline-timeout of the runs (default 2)
  --slack S         seconds past the time-out a run may take to end (default 10)
EOF
}

N=${FAULT_N:-2}
KINDS=kill-rank,stop-rank,kill-save,disk-full
SEED=${FAULT_SEED:-}
BUILD=build
DATA=../shared/data/tinyshakespeare.txt
WORK=
KEEP=0
TIMEOUT=2
SLACK=10
while (($#)); do
  case "$1" in
    -n) N=$2; shift 2 ;;
    --kinds) KINDS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --slack) SLACK=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fault-campaign: unknown flag '$1'; hint: see --help" >&2; exit 2 ;;
  esac
done
if ! { [[ $N =~ ^[0-9]+$ ]] && ((N >= 1 && N <= 1000)); }; then
  echo "fault-campaign: -n '$N': expected a whole number in [1, 1000]" >&2
  exit 2
fi
for v in TIMEOUT SLACK; do
  [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
    { echo "fault-campaign: --${v,,} '${!v}': expected seconds, e.g. 2" >&2; exit 2; }
done
IFS=, read -ra KIND_LIST <<<"$KINDS"
for k in "${KIND_LIST[@]}"; do
  case "$k" in kill-rank | stop-rank | kill-save | disk-full) ;;
    *) echo "fault-campaign: --kinds: unknown kind '$k'; hint: kill-rank,stop-rank,kill-save,disk-full" >&2
       exit 2 ;;
  esac
done
[[ -z $SEED ]] && SEED=$(( ${EPOCHREALTIME/./} % 1000000 ))
[[ $SEED =~ ^[0-9]+$ ]] || { echo "fault-campaign: --seed '$SEED': expected a whole number" >&2; exit 2; }
RANDOM=$SEED

TP=$BUILD/tools/tightpipe/tightpipe
[[ -x $TP ]] || { echo "fault-campaign: no $TP; hint: build first (scripts/setup.sh)" >&2; exit 2; }
TP=$(cd "$(dirname "$TP")" && pwd)/tightpipe
[[ -f $DATA ]] || { echo "fault-campaign: --data '$DATA': no such file (the training text)" >&2; exit 2; }
DATA=$(cd "$(dirname "$DATA")" && pwd)/$(basename "$DATA")
if [[ -z $WORK ]]; then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/tightpipe-fault.XXXXXX")
else
  mkdir -p "$WORK"
fi
WORK=$(cd "$WORK" && pwd)
MOUNTS=()
cleanup() {
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
  ((KEEP)) || rm -rf "$WORK"
}
trap cleanup EXIT

PP=2
SAVE_INTERVAL=5
# A 2-layer model at about 10 ms a step on 2 ranks, checkpoints of 1.6 MB: saves are frequent and
# take long enough to be caught in flight.
MODEL=(--pp "$PP" --schedule 1f1b --num-layers 2 --hidden-size 64 --num-attention-heads 2
  --seq-length 64 --micro-batch-size 4 --num-microbatches 4 --data-path "$DATA" --eval-iters 0
  --pipeline-timeout "$TIMEOUT")
KEEP_LAST=()  # iteration directories (when this build has them): keep the disk use bounded
"$TP" train --help 2>/dev/null | grep -q -- --keep-last-checkpoints && KEEP_LAST=(--keep-last-checkpoints 3)
HAVE_MPI=0
command -v mpirun >/dev/null 2>&1 && HAVE_MPI=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none)
LINGER=1  # kLauncherLingerS: a failing rank waits this long before mpirun may stop the job
LIMIT=$(awk -v t="$TIMEOUT" -v l="$LINGER" -v s="$SLACK" 'BEGIN { print t + l + s }')

now_us() { echo "${EPOCHREALTIME/./}"; }
secs_since() { awk -v a="$(now_us)" -v b="$1" 'BEGIN { printf "%.2f", (a - b) / 1e6 }'; }
rand_delay() { awk -v r="$RANDOM" -v lo="$1" -v hi="$2" 'BEGIN { printf "%.3f", lo + r / 32767 * (hi - lo) }'; }
# Live (not zombie) processes of session $1.
session_pids() { ps -e -o pid=,sid=,stat= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ { print $1 }'; }
# The run's processes in session $1: all but the shell that leads it.
run_pids() { session_pids "$1" | grep -vx "$1"; }
# The pid of MPI rank $2 in session $1.
rank_pid() {
  local p
  for p in $(session_pids "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}
# Step N of the last line of log $1 matching "^$2 .* at step N" (or "^step N/" for $2 = step).
last_step() {
  if [[ $2 == step ]]; then
    sed -n 's/^step *\([0-9][0-9]*\)\/.*/\1/p' "$1" | tail -1
  else
    sed -n "s/^$2 .* at step \([0-9][0-9]*\).*/\1/p" "$1" | tail -1
  fi
}
# Waits up to $3 s for a line matching $2 in log $1 while process $4 lives; 0 when it appeared.
wait_for_line() {
  local until=$(($(now_us) + ${3%.*} * 1000000))
  while (($(now_us) < until)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$4" 2>/dev/null || { grep -q "$2" "$1" 2>/dev/null; return; }
    sleep 0.02
  done
  return 1
}
tmp_files() { compgen -G "$1/*.tmp" || compgen -G "$1/*/*.tmp"; }

# Totals per kind.
declare -A T_RUN T_NOTRUN T_CLEAN T_CLEAN_ASKED T_ORPHANS T_LOADABLE T_LOST T_STEPS_LOST \
  T_REDONE T_INFLIGHT T_MAXEND T_NOSPACE NOTRUN_WHY
for k in "${KIND_LIST[@]}"; do
  for t in T_RUN T_NOTRUN T_CLEAN T_CLEAN_ASKED T_ORPHANS T_LOADABLE T_LOST T_STEPS_LOST T_REDONE \
    T_INFLIGHT T_MAXEND T_NOSPACE; do
    printf -v "${t}[$k]" 0
  done
done
FAILED_TRIALS=()

# One trial: kind $1, number $2, transport $3 (threads|mpi), mpirun mode $4 (default|recovery).
trial() {
  local kind=$1 i=$2 transport=$3 mode=$4
  local name="$kind #$i ($transport)"
  [[ $mode == recovery ]] && name="$kind #$i ($transport, mpirun --enable-recovery)"
  local dir=$WORK/$kind-$i
  local save=$dir/ckpt log=$dir/run.log
  mkdir -p "$save"
  if [[ $transport == mpi ]] && ((!HAVE_MPI)); then
    not_run "$kind" "$name" "no mpirun"
    return
  fi
  if [[ $kind == disk-full ]]; then
    if mount -t tmpfs -o size=64m tmpfs "$save" 2>"$dir/mount.err"; then
      MOUNTS+=("$save")
    else
      not_run "$kind" "$name" "cannot mount a tmpfs: $(head -c 200 "$dir/mount.err" | tr '\n' ' ')(run as root)"
      return
    fi
  fi
  local cmd=("$TP" train "${MODEL[@]}" --save "$save" --save-interval "$SAVE_INTERVAL"
    "${KEEP_LAST[@]}" --train-iters 1000000 --log-interval 1 --transport "$transport")
  if [[ $transport == mpi ]]; then
    local flags=("${MPIRUN[@]}")
    [[ $mode == recovery ]] && flags+=(--enable-recovery)
    cmd=("${flags[@]}" -np "$PP" "${cmd[@]}")
  fi
  # A shell leads the run's session and outlives the run's processes, so that killing them is not
  # a job of this script dying by a signal (bash would print "Killed" for it).
  setsid sh -c '"$@"; exit $?' sh "${cmd[@]}" >"$log" 2>&1 </dev/null &
  local pid=$!
  # setsid(2) runs in the child after fork and exec: until then the child is in this script's
  # session, so a loaded machine may need a moment (a first look too early failed a ctest run).
  local sid="" tries
  for ((tries = 0; tries < 100; tries++)); do
    sid=$(ps -o sid= -p "$pid" | tr -d ' ')
    [[ $sid == "$pid" || -z $sid ]] && break
    sleep 0.05
  done
  if [[ $sid != "$pid" ]]; then
    echo "fault-campaign: setsid did not make $pid a session leader (sid '$sid')" >&2
    kill -9 "$pid" 2>/dev/null
    exit 1
  fi
  local verdict=() ok=1
  # The fault comes after the first complete save, at a random time.
  if ! wait_for_line "$log" "^saved .* at step" 60 "$pid"; then
    verdict+=("no save within 60 s: $(grep -m1 -i error "$log" | head -c 300)")
    kill -9 $(run_pids "$sid") 2>/dev/null
    { wait "$pid"; } 2>/dev/null
    finish_trial "$kind" "$name" 0 "${verdict[*]}"
    return
  fi
  sleep "$(rand_delay 0.1 1.0)"
  local victim="" vpid="" t_fault what
  case $kind in
    kill-rank | stop-rank)
      victim=$((RANDOM % PP))
      vpid=$(rank_pid "$sid" "$victim")
      if [[ -z $vpid ]]; then
        verdict+=("rank $victim not found in session $sid")
        kill -9 $(run_pids "$sid") 2>/dev/null
        { wait "$pid"; } 2>/dev/null
        finish_trial "$kind" "$name" 0 "${verdict[*]}"
        return
      fi
      if [[ $kind == kill-rank ]]; then
        kill -KILL "$vpid"
        what="kill -9 rank $victim"
      else
        kill -STOP "$vpid"
        what="SIGSTOP rank $victim"
      fi
      ;;
    kill-save)
      local pids inflight=0
      pids=$(run_pids "$sid")
      # Polled without a fork (a save without fsync takes about a millisecond here).
      local until=$((${EPOCHREALTIME/./} + 3000000))
      while ((${EPOCHREALTIME/./} < until)); do
        tmp_files "$save" >/dev/null && { inflight=1; break; }
      done
      kill -KILL $pids 2>/dev/null
      kill -KILL $(run_pids "$sid") 2>/dev/null
      ((inflight)) && T_INFLIGHT[$kind]=$((T_INFLIGHT[$kind] + 1))
      what="SIGKILL all $(wc -w <<<"$pids") process(es) $( ((inflight)) && echo "with a .tmp in flight" || echo "(no .tmp seen in 3 s)")"
      ;;
    disk-full)
      dd if=/dev/zero of="$save/filler" bs=1M status=none 2>/dev/null
      what="filled the tmpfs"
      ;;
  esac
  t_fault=$(now_us)
  # Wait for the run to end (kill-save: it is dead already).
  local limit_us
  limit_us=$(awk -v l="$LIMIT" 'BEGIN { printf "%d", l * 1e6 }')
  while kill -0 "$pid" 2>/dev/null && (($(now_us) - t_fault < limit_us)); do sleep 0.05; done
  local ended_in
  ended_in=$(secs_since "$t_fault")
  local hung=0
  if kill -0 "$pid" 2>/dev/null; then
    hung=1
    kill -9 $(run_pids "$sid") 2>/dev/null
  fi
  { wait "$pid"; } 2>/dev/null
  local rc=$?
  # The stopped rank is ours to end; anything else left in the session is an orphan.
  if [[ $kind == stop-rank && -n $vpid ]] && kill -0 "$vpid" 2>/dev/null; then
    kill -KILL "$vpid" 2>/dev/null
    kill -CONT "$vpid" 2>/dev/null
    what+=" (still there after the run ended: killed by the campaign)"
  fi
  sleep 0.5
  local left
  left=$(session_pids "$sid")
  local orphans=0
  if [[ -n $left ]]; then
    orphans=$(wc -w <<<"$left")
    T_ORPHANS[$kind]=$((T_ORPHANS[$kind] + orphans))
    verdict+=("$orphans orphan(s): $(ps -o pid=,comm= -p "$(tr ' \n' ',,' <<<"$left" | sed 's/,*$//')" | tr '\n' ' ')")
    ok=0
    kill -9 $left 2>/dev/null
  fi
  # Clean end: non-zero, an error line, within the limit.
  local errline
  errline=$(grep -m1 -E "tightpipe train: error:|mpirun noticed that process rank" "$log" | head -c 160)
  if [[ $kind != kill-save ]]; then
    T_CLEAN_ASKED[$kind]=$((T_CLEAN_ASKED[$kind] + 1))
    if ((hung)); then
      verdict+=("still running ${LIMIT} s after the fault")
      ok=0
    elif ((rc == 0)); then
      verdict+=("exit status 0")
      ok=0
    elif [[ -z $errline ]]; then
      verdict+=("exit $rc without an error line")
      ok=0
    else
      T_CLEAN[$kind]=$((T_CLEAN[$kind] + 1))
      awk -v a="$ended_in" -v b="${T_MAXEND[$kind]}" 'BEGIN { exit !(a > b) }' && T_MAXEND[$kind]=$ended_in
    fi
  fi
  if [[ $kind == disk-full ]] && grep -qi "no space left on device" "$log"; then
    T_NOSPACE[$kind]=$((T_NOSPACE[$kind] + 1))
  fi
  local ntmp
  ntmp=$(find "$save" -name '*.tmp' 2>/dev/null | wc -l)
  # The newest complete checkpoint must load, at or after the last completed save.
  local saved loaded last_step
  saved=$(last_step "$log" saved)
  last_step=$(last_step "$log" step)
  "$TP" train "${MODEL[@]}" --load "$save" --train-iters 1000000 --exit-interval 1 \
    >"$dir/resume.log" 2>&1 </dev/null
  local rrc=$?
  loaded=$(last_step "$dir/resume.log" loaded)
  ((rrc)) && loaded=""  # a rank may say "loaded" while another one fails to
  local lost=0
  if ((rrc == 0)) && [[ -n $loaded ]]; then
    T_LOADABLE[$kind]=$((T_LOADABLE[$kind] + 1))
    if ((loaded < saved)); then
      lost=1
      verdict+=("resumed at step $loaded, before the completed save at step $saved")
    fi
    T_REDONE[$kind]=$((T_REDONE[$kind] + ${last_step:-0} - loaded))
  else
    lost=1
    verdict+=("the checkpoint does not load: $(grep -m1 -E "error" "$dir/resume.log" | head -c 300)")
  fi
  if ((lost)); then
    ok=0
    T_LOST[$kind]=$((T_LOST[$kind] + 1))
    T_STEPS_LOST[$kind]=$((T_STEPS_LOST[$kind] + saved - ${loaded:-0}))
  fi
  local summary="$what; ended in ${ended_in} s, exit $rc"
  [[ -n $errline ]] && summary+=", '${errline}'"
  local resumed=${loaded:-none}
  ((rrc)) && resumed="none (exit $rrc)"
  summary+="; last complete save step $saved, last step $last_step, resumed at $resumed"
  ((ntmp)) && summary+="; $ntmp .tmp file(s) left"
  finish_trial "$kind" "$name" "$ok" "$summary${verdict:+; FAILED: ${verdict[*]}}"
}

not_run() {
  T_NOTRUN[$1]=$((T_NOTRUN[$1] + 1))
  NOTRUN_WHY[$1]=$3
  echo "trial $2: NOT RUN: $3"
}

finish_trial() {
  T_RUN[$1]=$((T_RUN[$1] + 1))
  if (($3)); then
    echo "trial $2: ok: $4"
  else
    echo "trial $2: $4"
    FAILED_TRIALS+=("$2")
  fi
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
  MOUNTS=()
}

echo "fault campaign: $N trial(s) per kind (${KIND_LIST[*]}), seed $SEED, --pipeline-timeout $TIMEOUT s, time limit $LIMIT s after the fault, scratch $WORK"
echo "model: ${MODEL[*]} --save-interval $SAVE_INTERVAL ${KEEP_LAST[*]}"
start_us=$(now_us)
for k in "${KIND_LIST[@]}"; do
  for ((i = 1; i <= N; i++)); do
    case $k in
      kill-rank | stop-rank) transport=mpi; mode=$([[ $((i % 2)) == 1 ]] && echo default || echo recovery) ;;
      *) transport=$([[ $((i % 2)) == 1 ]] && echo threads || echo mpi); mode=default ;;
    esac
    trial "$k" "$i" "$transport" "$mode"
  done
done

echo
echo "fault campaign summary (seed $SEED, $(secs_since "$start_us") s):"
printf '%-10s %6s %8s %18s %8s %12s %11s %11s %12s\n' kind trials "not run" "clean errors" orphans \
  "loadable" "ckpts lost" "steps lost" "steps redone"
tot_run=0 tot_notrun=0 tot_clean=0 tot_asked=0 tot_orph=0 tot_load=0 tot_lost=0 tot_slost=0 tot_redone=0
for k in "${KIND_LIST[@]}"; do
  clean="n/a"
  ((T_CLEAN_ASKED[$k])) && clean="${T_CLEAN[$k]}/${T_CLEAN_ASKED[$k]} (max ${T_MAXEND[$k]} s)"
  printf '%-10s %6d %8d %18s %8d %12s %11d %11d %12d\n' "$k" "${T_RUN[$k]}" "${T_NOTRUN[$k]}" "$clean" \
    "${T_ORPHANS[$k]}" "${T_LOADABLE[$k]}/${T_RUN[$k]}" "${T_LOST[$k]}" "${T_STEPS_LOST[$k]}" \
    "${T_REDONE[$k]}"
  tot_run=$((tot_run + T_RUN[$k])); tot_notrun=$((tot_notrun + T_NOTRUN[$k]))
  tot_clean=$((tot_clean + T_CLEAN[$k])); tot_asked=$((tot_asked + T_CLEAN_ASKED[$k]))
  tot_orph=$((tot_orph + T_ORPHANS[$k])); tot_load=$((tot_load + T_LOADABLE[$k]))
  tot_lost=$((tot_lost + T_LOST[$k])); tot_slost=$((tot_slost + T_STEPS_LOST[$k]))
  tot_redone=$((tot_redone + T_REDONE[$k]))
done
printf '%-10s %6d %8d %18s %8d %12s %11d %11d %12d\n' all "$tot_run" "$tot_notrun" "$tot_clean/$tot_asked" \
  "$tot_orph" "$tot_load/$tot_run" "$tot_lost" "$tot_slost" "$tot_redone"
for k in "${KIND_LIST[@]}"; do
  [[ $k == kill-save ]] && ((T_RUN[$k])) &&
    echo "kill-save: ${T_INFLIGHT[$k]} of ${T_RUN[$k]} kills landed with a save in flight (.tmp present)"
  [[ $k == disk-full ]] && ((T_RUN[$k])) &&
    echo "disk-full: ${T_NOSPACE[$k]} of ${T_RUN[$k]} runs said 'no space left on device'"
done
echo "(clean errors: non-zero exit + error line within $LIMIT s of the fault, not asked of kill-save;"
echo " ckpts lost: the newest complete checkpoint did not load or resumed before the last completed"
echo " save; steps lost: those completed saves' steps; steps redone: last step run - step resumed)"
((KEEP)) && echo "logs: $WORK"
if ((${#FAILED_TRIALS[@]})); then
  echo "FAILED: ${#FAILED_TRIALS[@]} trial(s): ${FAILED_TRIALS[*]}"
  exit 1
fi
if ((tot_notrun)); then
  for k in "${KIND_LIST[@]}"; do
    ((T_NOTRUN[$k])) && echo "NOT RUN: ${T_NOTRUN[$k]} $k trial(s): ${NOTRUN_WHY[$k]}"
  done
  exit 77
fi
echo "PASSED: 100% clean errors, 0 orphans, 0 checkpoints lost"
