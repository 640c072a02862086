#!/usr/bin/env bash
# The papers' attention kinds on real language (docs/results.md): every run of
# configs/sweeps/gettext_attention.py trained to a validation plateau on the
# gettext corpus, flexible attention's tau trade-off, decoding time against
# global attention on a quiet machine, and the tables.
#
#   bash experiments/gettext_attention/run.sh ROOT [--dry-run]
#
# DATA (default /tmp/parity/data) is the folder `python -m
# experiments.peer_parity.parity prepare` wrote (pieces.{train,dev,test}.*);
# ROOT gets one workdir per run. Parts (PARTS, default "train tau decode
# record tables"):
#   train   the sweep by CORES (default: the machine's count) processes,
#           each pinned to a core with one XLA thread, started 30 s apart:
#           each takes the next run no other one holds. It resumes: run it
#           again after an interruption.
#   tau     flexible and its fine-tuned run evaluated at Shu & Nakayama's
#           tau values, beam BEAM (5), one per core.
#   decode  benchmarks/trained_decode.py on core 0 alone: every run against
#           global general, greedy and beam, REPEATS (3) rounds; JSON in
#           ROOT/trained_decode.json.
#   record  each evaluated run's small files (config.json, eval_results.json,
#           its test hypotheses and references, tau_sweep.json, metrics.jsonl
#           with one training line per validation; no checkpoints:
#           experiments/records.py) into RECORDS/<run>/ (default
#           experiments/gettext_attention/records), and the decode
#           JSON as RECORDS/trained_decode_<date>.json: runs made on
#           different machines or days meet there.
#   tables  RECORDS/results.md and results.csv (`sweep aggregate
#           --by_length --paired_with=global_general`).
# --dry-run prints the commands instead, after the `cd` to the repository
# root they need. PYTHON: nmt_jax's interpreter (python). NMT_JAX_KEEP_FREED_MEMORY
# is 1 unless set. On a quiet 2-core machine training takes about 10 hours
# (10 runs of 1.5-2.5 hours of a core each), the rest 20 minutes.
set -euo pipefail

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; } # the header comment
error() { echo "error: $*" >&2; exit 2; }
ROOT= DRY_RUN=
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    -*) error "unknown argument '$arg'; see --help" ;;
    *) [[ -z "$ROOT" ]] || error "one ROOT directory, not '$ROOT' and '$arg'"; ROOT=$arg ;;
  esac
done
[[ -n "$ROOT" ]] || error "give the directory for the runs: experiments/gettext_attention/run.sh ROOT"
REPO_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[[ "$ROOT" == /* ]] || ROOT="$PWD/$ROOT"
DATA=${DATA:-/tmp/parity/data}
[[ "$DATA" == /* ]] || DATA="$PWD/$DATA"
PARTS=" ${PARTS:-train tau decode record tables} "
RECORDS=${RECORDS:-$REPO_ROOT/experiments/gettext_attention/records}
[[ "$RECORDS" == /* ]] || RECORDS="$PWD/$RECORDS"
CORES=${CORES:-$(nproc)}
BEAM=${BEAM:-5}
REPEATS=${REPEATS:-3}
PYTHON=${PYTHON:-python}
[[ -n "$DRY_RUN" || -f "$DATA/pieces.train.en" ]] ||
  error "$DATA/pieces.train.en not found; set DATA to the folder real_corpus_parity prepare wrote"
cd "$REPO_ROOT"
# One XLA thread a process: the processes are placed on cores by taskset.
export XLA_FLAGS="${XLA_FLAGS:-} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
# glibc keeping freed memory: with glibc as installed these runs spent 13-20%
# of their CPU time in the kernel, with it 1% and x1.2 the training rate
# (nmt_jax/system/allocator.py; the same numbers either way).
export NMT_JAX_KEEP_FREED_MEMORY=${NMT_JAX_KEEP_FREED_MEMORY:-1}
if [[ -n "$DRY_RUN" ]]; then printf 'cd %q\n' "$REPO_ROOT"; fi

part() { [[ "$PARTS" == *" $1 "* ]]; }
run() { # run command...: shown with --dry-run, else run
  if [[ -n "$DRY_RUN" ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}
start() { # start command...: shown with --dry-run, else run in the background
  if [[ -n "$DRY_RUN" ]]; then printf '%q ' "$@"; echo; else "$@" & fi
}
in_parallel() { # wait for the background jobs; fail if one did
  local failed=0
  for job in $(jobs -p); do wait "$job" || failed=1; done
  [[ $failed == 0 ]] || error "a run failed: see the logs in $ROOT/logs"
}
SWEEP=configs/sweeps/gettext_attention.py:$DATA

if part train; then
  for ((i = 0; i < CORES; i++)); do
    # Apart: a run's lock is taken a few seconds after its process starts.
    [[ $i == 0 || -n "$DRY_RUN" ]] || sleep 30
    start taskset -c "$i" "$PYTHON" -m nmt_jax.sweep run --sweep="$SWEEP" \
      --root="$ROOT"
  done
  in_parallel
fi
if part tau; then
  core=0
  for name in flexible flexible_finetune; do
    start taskset -c $((core % CORES)) "$PYTHON" -m nmt_jax.sweep tau \
      --workdir="$ROOT/$name" --beam_size="$BEAM"
    core=$((core + 1))
  done
  in_parallel
fi
if part decode; then
  run taskset -c 0 "$PYTHON" -m benchmarks.trained_decode --root="$ROOT" \
    --reference=global_general --threads=1 --repeats="$REPEATS" \
    --json="$ROOT/trained_decode.json"
fi
if part record; then
  for results in "$ROOT"/*/eval_results.json; do
    [[ -f "$results" ]] || continue
    from=$(dirname "$results")
    run "$PYTHON" -m experiments.records "$from" "$RECORDS/$(basename "$from")"
  done
  if [[ -f "$ROOT/trained_decode.json" ]]; then
    run cp "$ROOT/trained_decode.json" "$RECORDS/trained_decode_$(date +%F).json"
  fi
fi
if part tables; then
  run "$PYTHON" -m nmt_jax.sweep aggregate --root="$RECORDS" --by_length \
    --paired_with=global_general --markdown="$RECORDS/results.md" \
    --csv="$RECORDS/results.csv"
fi
