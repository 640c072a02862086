#!/usr/bin/env bash
# One host with several GPUs.
#
#   launch/multi_gpu.sh --config=configs/memory_k64.py:wmt17_de_en --workdir=runs/memory_k64 \
#                       [--gpus=0,1,2,3] [--processes=one|per-gpu] [--port=12355] [--dry-run] \
#                       [-- --config.train.batch_size=512]
#
# --processes=one (default): a single process drives the GPUs (jit over a mesh of
# all of them). --processes=per-gpu: one process per GPU joined by jax.distributed
# on localhost (what a multi-node run does, on one machine); each writes
# <workdir>/process<i>.log and the script waits for all of them.
# --gpus defaults to all GPUs nvidia-smi lists. --dry-run prints the commands.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO_ROOT/launch/common.sh"

GPUS="" PROCESSES="one" PORT="12355" CONFIG="" WORKDIR="" EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpus=*) GPUS="${1#*=}" ;;
    --processes=*) PROCESSES="${1#*=}" ;;
    --port=*) PORT="${1#*=}" ;;
    --config=*) CONFIG="${1#*=}" ;;
    --workdir=*) WORKDIR="${1#*=}" ;;
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    --gpus|--processes|--port|--config|--workdir) die "write $1=VALUE (with '=')" ;;
    *) die "unknown argument '$1'; see launch/multi_gpu.sh --help (nmt_jax flags go after --)" ;;
  esac
  shift
done

CONFIG="$(resolve_config "$CONFIG")" || exit 2
[[ -n "$WORKDIR" ]] || die "--workdir is required (e.g. --workdir=runs/memory_k64)"
WORKDIR="$(from_here "$WORKDIR")"
[[ "$PROCESSES" == one || "$PROCESSES" == per-gpu ]] || \
  die "--processes=$PROCESSES must be 'one' or 'per-gpu'"
check_positive_int --port "$PORT"
if [[ -z "$GPUS" ]]; then
  command -v nvidia-smi > /dev/null || die "nvidia-smi not found; list the GPUs with --gpus=0,1,..."
  GPUS="$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)"
fi
[[ "$GPUS" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus=$GPUS must be GPU numbers like 0,1,2,3"
IFS=, read -r -a GPU_LIST <<< "$GPUS"

cd "$REPO_ROOT"
# The commands name configs/ from the repository root: so does the dry run.
if [[ "$DRY_RUN" == 1 ]]; then echo "cd $(quote "$REPO_ROOT")"; fi
MAIN=(python -m nmt_jax.main --config="$CONFIG" --workdir="$WORKDIR")
if [[ "$PROCESSES" == one ]]; then
  run env CUDA_VISIBLE_DEVICES="$GPUS" "${MAIN[@]}" "${EXTRA[@]}"
  exit
fi

N="${#GPU_LIST[@]}"
run mkdir -p "$WORKDIR"
# Ctrl-C (or SIGTERM) reaches every process once, each closes its checkpoints,
# and the script exits once all have. The trap is set before the first start,
# so a signal while they start leaves none running on its own: it reaches the
# ones started after it as well (where it ends them before Python runs).
PIDS=() SENT=() SIGNALS=0
forward_signals() {
  local i
  for i in "${!PIDS[@]}"; do
    while (( ${SENT[i]:-0} < SIGNALS )); do
      SENT[i]=$(( ${SENT[i]:-0} + 1 ))
      kill -INT "${PIDS[i]}" 2> /dev/null || true
    done
  done
}
[[ "$DRY_RUN" == 1 ]] || trap 'SIGNALS=$(( SIGNALS + 1 )); forward_signals' INT TERM
for ((i = 0; i < N; i++)); do
  COMMAND=(env CUDA_VISIBLE_DEVICES="$GPUS" "${MAIN[@]}" --coordinator_address="localhost:$PORT"
           --num_processes="$N" --process_id="$i" --local_device_ids="$i" "${EXTRA[@]}")
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "$(quote "${COMMAND[@]}") > $(quote "$WORKDIR/process$i.log") 2>&1 &"
  else
    # A session of its own: Ctrl-C reaches it once, from the trap above.
    setsid "${COMMAND[@]}" > "$WORKDIR/process$i.log" 2>&1 &
    PIDS[i]=$!
    forward_signals
  fi
done
if [[ "$DRY_RUN" == 1 ]]; then
  echo "wait"
  exit
fi
# A signal ends `wait` early, so each pid is waited for until it is gone;
# each at least once: bash keeps the status of a process that ended while
# the script waited for another (`kill -0` fails for it).
STATUS=0
for pid in "${PIDS[@]}"; do
  while :; do
    CODE=0
    wait "$pid" || CODE=$?
    kill -0 "$pid" 2> /dev/null || break
  done
  (( CODE == 0 )) || STATUS=$CODE
done
exit "$STATUS"
