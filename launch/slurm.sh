#!/usr/bin/env bash
# SLURM GPU cluster: writes an sbatch script that srun-s nmt_jax on every task, and submits it.
#
#   launch/slurm.sh --nodes=2 --gpus-per-node=8 --config=configs/memory_k64.py:wmt17_de_en \
#                   --workdir=/shared/runs/memory_k64 [--per=gpu|node] [--partition=gpu] \
#                   [--time=24:00:00] [--account=ACC] [--venv=/shared/venvs/nmt_jax] \
#                   [--job-name=nmt_jax] [--dry-run] [-- --config.train.batch_size=512]
#
# --per=gpu (default): one process per GPU (nodes x gpus-per-node tasks, each
# driving the GPU numbered by its SLURM_LOCALID). --per=node: one process per node
# driving all of its GPUs. Processes join through jax.distributed, which reads
# the SLURM environment. --dry-run prints the sbatch script and the command instead
# of submitting. The workdir must be on storage every node sees.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO_ROOT/launch/common.sh"

NODES="" GPUS="" PER="gpu" PARTITION="" TIME="24:00:00" ACCOUNT="" VENV="" JOB="nmt_jax"
CONFIG="" WORKDIR="" EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes=*) NODES="${1#*=}" ;;
    --gpus-per-node=*) GPUS="${1#*=}" ;;
    --per=*) PER="${1#*=}" ;;
    --partition=*) PARTITION="${1#*=}" ;;
    --time=*) TIME="${1#*=}" ;;
    --account=*) ACCOUNT="${1#*=}" ;;
    --venv=*) VENV="${1#*=}" ;;
    --job-name=*) JOB="${1#*=}" ;;
    --config=*) CONFIG="${1#*=}" ;;
    --workdir=*) WORKDIR="${1#*=}" ;;
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    --nodes|--gpus-per-node|--per|--partition|--time|--account|--venv|--job-name|--config|--workdir)
      die "write $1=VALUE (with '=')" ;;
    *) die "unknown argument '$1'; see launch/slurm.sh --help (nmt_jax flags go after --)" ;;
  esac
  shift
done

[[ -n "$NODES" ]] || die "--nodes is required (e.g. --nodes=2)"
check_positive_int --nodes "$NODES"
[[ -n "$GPUS" ]] || die "--gpus-per-node is required (e.g. --gpus-per-node=8)"
check_positive_int --gpus-per-node "$GPUS"
[[ "$PER" == gpu || "$PER" == node ]] || die "--per=$PER must be 'gpu' or 'node'"
[[ "$TIME" =~ ^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$ ]] || die "--time=$TIME is not a SLURM time like 24:00:00"
# They go into #SBATCH lines: a space would cut one, a newline add another.
for pair in "--job-name=$JOB" "--partition=$PARTITION" "--account=$ACCOUNT"; do
  [[ "${pair#*=}" =~ ^[A-Za-z0-9_.,:+-]*$ ]] || \
    die "${pair%%=*}=$(printf '%q' "${pair#*=}") may hold only letters, digits and _.,:+- (SLURM names)"
done
CONFIG="$(resolve_config "$CONFIG")" || exit 2
[[ -n "$WORKDIR" ]] || die "--workdir is required, on storage every node sees"
WORKDIR="$(from_here "$WORKDIR")"
[[ -z "$VENV" || -f "$VENV/bin/activate" || "$DRY_RUN" == 1 ]] || \
  die "--venv=$VENV has no bin/activate; create it with python3 -m venv $VENV && $VENV/bin/pip install -e $REPO_ROOT"
[[ -z "$VENV" ]] || VENV="$(from_here "$VENV")"

MAIN=(python -m nmt_jax.main --distributed=on --config="$CONFIG" --workdir="$WORKDIR")
if [[ "$PER" == gpu ]]; then
  TASKS="$GPUS"
else
  # JAX gives each SLURM task one GPU unless told otherwise.
  TASKS=1
  MAIN+=(--local_device_ids="$(seq -s, 0 $((GPUS - 1)))")
fi
MAIN+=("${EXTRA[@]}")

SCRIPT="#!/bin/bash
#SBATCH --job-name=$JOB
#SBATCH --nodes=$NODES
#SBATCH --ntasks-per-node=$TASKS
#SBATCH --gpus-per-node=$GPUS
#SBATCH --time=$TIME
#SBATCH --output=slurm-%x-%j.out"
[[ -n "$PARTITION" ]] && SCRIPT+=$'\n'"#SBATCH --partition=$PARTITION"
[[ -n "$ACCOUNT" ]] && SCRIPT+=$'\n'"#SBATCH --account=$ACCOUNT"
SCRIPT+=$'\n'"set -euo pipefail"
SCRIPT+=$'\n'"cd $(quote "$REPO_ROOT")"
[[ -n "$VENV" ]] && SCRIPT+=$'\n'"source $(quote "$VENV/bin/activate")"
SCRIPT+=$'\n'"srun $(quote "${MAIN[@]}")"

if [[ "$DRY_RUN" == 1 ]]; then
  echo "$SCRIPT"
  echo "# submit with:"
  echo "sbatch <this script>"
else
  FILE="$(mktemp "${TMPDIR:-/tmp}/nmt_jax_XXXX.sbatch")"
  echo "$SCRIPT" > "$FILE"
  echo "sbatch script: $FILE"
  sbatch "$FILE"
fi
