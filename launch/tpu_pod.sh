#!/usr/bin/env bash
# Cloud TPU VM (single host or pod slice): create, install, run on all workers, logs, stop, delete.
#
#   launch/tpu_pod.sh create  --name=nmt --zone=us-central2-b --accelerator=v4-32
#   launch/tpu_pod.sh install --name=nmt --zone=us-central2-b
#   launch/tpu_pod.sh run     --name=nmt --zone=us-central2-b --config=configs/memory_k64.py:wmt17_de_en \
#                             --workdir=/mnt/shared/runs/memory_k64 [-- --config.train.batch_size=512]
#   launch/tpu_pod.sh logs    --name=nmt --zone=us-central2-b [--worker=0]
#   launch/tpu_pod.sh stop    --name=nmt --zone=us-central2-b
#   launch/tpu_pod.sh delete  --name=nmt --zone=us-central2-b
#
# Every action takes --dry-run (print the gcloud commands instead of running them)
# and --project=ID. `run` starts `python -m nmt_jax.main --distributed=on` on every
# worker; JAX finds the other workers itself. The workdir must be a directory all
# workers see (a Filestore/NFS or gcsfuse mount): every process writes its shards of
# each checkpoint there. `stop` sends SIGINT to the process `run` started (its pid
# in ~/nmt_jax.pid on each worker), so the run closes its checkpoints and the same
# `run` command resumes it.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO_ROOT/launch/common.sh"

usage() {
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" # the header comment
}

ACTION="${1:-}"
case "$ACTION" in
  create|install|run|logs|stop|delete) shift ;;
  -h|--help) usage; exit 0 ;;
  "") die "no action; use one of create, install, run, logs, stop, delete (see --help)" ;;
  *) die "unknown action '$ACTION'; use one of create, install, run, logs, stop, delete" ;;
esac

NAME="" ZONE="" PROJECT="" ACCELERATOR="" VERSION="tpu-ubuntu2204-base" CONFIG="" WORKDIR=""
WORKER="0" EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name=*) NAME="${1#*=}" ;;
    --zone=*) ZONE="${1#*=}" ;;
    --project=*) PROJECT="${1#*=}" ;;
    --accelerator=*) ACCELERATOR="${1#*=}" ;;
    --version=*) VERSION="${1#*=}" ;;
    --config=*) CONFIG="${1#*=}" ;;
    --workdir=*) WORKDIR="${1#*=}" ;;
    --worker=*) WORKER="${1#*=}" ;;
    --dry-run) DRY_RUN=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    --name|--zone|--project|--accelerator|--version|--config|--workdir|--worker)
      die "write $1=VALUE (with '=')" ;;
    *) die "unknown argument '$1'; see launch/tpu_pod.sh --help (nmt_jax flags go after --)" ;;
  esac
  shift
done

[[ -n "$NAME" ]] || die "--name is required (the TPU VM name, e.g. --name=nmt)"
[[ "$NAME" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || \
  die "--name=$NAME is not a valid TPU name (lowercase letters, digits and '-')"
[[ -n "$ZONE" ]] || die "--zone is required (e.g. --zone=us-central2-b)"
[[ "$WORKER" == all || "$WORKER" =~ ^[0-9]+$ ]] || die "--worker=$WORKER must be a number or 'all'"

GCLOUD=(gcloud compute tpus tpu-vm)
WHERE=(--zone="$ZONE")
[[ -n "$PROJECT" ]] && WHERE+=(--project="$PROJECT")
LOG='~/nmt_jax.log'
PID='~/nmt_jax.pid'  # the launched run's process: `stop` ends it and nothing else

case "$ACTION" in
  create)
    [[ -n "$ACCELERATOR" ]] || die "create needs --accelerator (e.g. --accelerator=v4-32)"
    [[ "$ACCELERATOR" =~ ^v[2-6][a-z]*-[0-9]+$ ]] || \
      die "--accelerator=$ACCELERATOR is not a TPU type like v4-32 or v5litepod-16"
    run "${GCLOUD[@]}" create "$NAME" "${WHERE[@]}" --accelerator-type="$ACCELERATOR" \
      --version="$VERSION"
    ;;
  install)
    # The committed tree of this checkout (git archive), unpacked and installed on every worker.
    ARCHIVE="${TMPDIR:-/tmp}/nmt_jax_src.tar.gz"
    run git -C "$REPO_ROOT" archive --format=tar.gz -o "$ARCHIVE" HEAD
    run "${GCLOUD[@]}" scp "$ARCHIVE" "$NAME:~/nmt_jax_src.tar.gz" "${WHERE[@]}" --worker=all
    run "${GCLOUD[@]}" ssh "$NAME" "${WHERE[@]}" --worker=all --command="rm -rf ~/nmt_jax && \
mkdir ~/nmt_jax && tar xzf ~/nmt_jax_src.tar.gz -C ~/nmt_jax && \
pip install -e ~/nmt_jax[data] 'jax[tpu]>=0.10.2,<0.11'"
    ;;
  run)
    check_config "$CONFIG"
    # The workers run the tree `install` shipped (git HEAD) from ~/nmt_jax.
    CONFIG_FILE="${CONFIG%%:*}"
    [[ "$CONFIG_FILE" != /* ]] && \
      git -C "$REPO_ROOT" ls-files --error-unmatch -- "$CONFIG_FILE" > /dev/null 2>&1 || \
      die "--config=$CONFIG_FILE must be a committed file of this checkout, named from its root (install ships git HEAD); commit it and run install"
    git -C "$REPO_ROOT" diff --quiet HEAD -- "$CONFIG_FILE" || \
      die "config file $CONFIG_FILE has uncommitted changes, which install does not ship; commit them and run install"
    [[ -n "$WORKDIR" ]] || die "run needs --workdir on storage every worker sees (e.g. --workdir=/mnt/shared/runs/x)"
    [[ "$WORKDIR" == /* ]] || \
      die "--workdir=$WORKDIR must be absolute, on storage every worker sees (e.g. /mnt/shared/runs/x): a relative one lands in ~/nmt_jax, which install replaces"
    COMMAND="$(quote python3 -m nmt_jax.main --distributed=on --config="$CONFIG" \
      --workdir="$WORKDIR" "${EXTRA[@]}")"
    run "${GCLOUD[@]}" ssh "$NAME" "${WHERE[@]}" --worker=all \
      --command="cd ~/nmt_jax && { nohup $COMMAND > $LOG 2>&1 & echo \$! > $PID; }"
    ;;
  logs)
    run "${GCLOUD[@]}" ssh "$NAME" "${WHERE[@]}" --worker="$WORKER" --command="tail -n 200 -f $LOG"
    ;;
  stop)
    run "${GCLOUD[@]}" ssh "$NAME" "${WHERE[@]}" --worker=all \
      --command="[ -f $PID ] && kill -INT \$(cat $PID) 2>/dev/null; rm -f $PID; true"
    ;;
  delete)
    run "${GCLOUD[@]}" delete "$NAME" "${WHERE[@]}" --quiet
    ;;
esac
