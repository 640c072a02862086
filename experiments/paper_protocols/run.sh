#!/usr/bin/env bash
# The three papers' comparisons on one corpus, three seeds each
# (configs/sweeps/paper_protocols.py; experiments/paper_protocols/README.md).
#
#   DATA=W/data CORPUS=gettext bash experiments/paper_protocols/run.sh ROOT [--dry-run]
#
# DATA is the folder `python -m experiments.peer_parity.parity prepare` wrote
# (pieces.{train,dev,test}.*), CORPUS the records' name for it (gettext,
# help); ROOT gets one workdir per run. SETTINGS are appended to the sweep's
# argument (e.g. max_length=100,memory=sigmoid/softmax/renorm). Parts
# (PARTS, default "train tau record tables"):
#   train   the sweep by CORES (default: the machine's count) processes, each
#           pinned to a core (FIRST_CORE, 0, and up) with one XLA thread, so
#           that two corpora can share a machine; started 30 s apart: each
#           takes the next run no other one holds. It resumes: run it again
#           after an interruption.
#   tau     each fine-tuned flexible seed: tau chosen on dev by Shu &
#           Nakayama's rule, then scored on test (sweep tau --select_on_dev,
#           beam 5).
#   record  each evaluated run's small files (experiments/records.py) into
#           RECORDS/<run>/ (default experiments/paper_protocols/records/CORPUS).
#   tables  RECORDS/against_<reference>.md: `sweep aggregate` against each
#           reference the verdicts read (global_general, global_concat,
#           flexible_rnnsearch); then verdicts.md beside the corpora's
#           folders (verdicts.py: every corpus, the README's rule).
# --dry-run prints the commands instead, after the `cd` to the repository
# root they need. PYTHON: nmt_jax's interpreter (python).
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
[[ -n "$ROOT" ]] || error "give the directory for the runs: experiments/paper_protocols/run.sh ROOT"
[[ -n "${DATA:-}" ]] || error "set DATA to the folder parity prepare wrote (pieces.train.en, ...)"
[[ -n "${CORPUS:-}" ]] || error "set CORPUS to the records' name of the corpus (gettext, help)"
REPO_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[[ "$ROOT" == /* ]] || ROOT="$PWD/$ROOT"
[[ "$DATA" == /* ]] || DATA="$PWD/$DATA"
PARTS=" ${PARTS:-train tau record tables} "
RECORDS=${RECORDS:-$REPO_ROOT/experiments/paper_protocols/records/$CORPUS}
[[ "$RECORDS" == /* ]] || RECORDS="$PWD/$RECORDS"
CORES=${CORES:-$(nproc)}
FIRST_CORE=${FIRST_CORE:-0}
PYTHON=${PYTHON:-python}
[[ -n "$DRY_RUN" || -f "$DATA/pieces.train.en" ]] ||
  error "$DATA/pieces.train.en not found; set DATA to the folder parity prepare wrote"
cd "$REPO_ROOT"
export XLA_FLAGS="${XLA_FLAGS:-} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
export NMT_JAX_KEEP_FREED_MEMORY=${NMT_JAX_KEEP_FREED_MEMORY:-1}
if [[ -n "$DRY_RUN" ]]; then printf 'cd %q\n' "$REPO_ROOT"; fi

part() { [[ "$PARTS" == *" $1 "* ]]; }
run() { if [[ -n "$DRY_RUN" ]]; then printf '%q ' "$@"; echo; else "$@"; fi; }
start() { if [[ -n "$DRY_RUN" ]]; then printf '%q ' "$@"; echo; else "$@" & fi; }
in_parallel() {
  local failed=0
  for job in $(jobs -p); do wait "$job" || failed=1; done
  [[ $failed == 0 ]] || error "a run failed: see the logs in $ROOT/logs"
}
SWEEP=configs/sweeps/paper_protocols.py:$DATA${SETTINGS:+,$SETTINGS}

if part train; then
  for ((i = 0; i < CORES; i++)); do
    [[ $i == 0 || -n "$DRY_RUN" ]] || sleep 30
    start taskset -c $((FIRST_CORE + i)) "$PYTHON" -m nmt_jax.sweep run --sweep="$SWEEP" \
      --root="$ROOT"
  done
  in_parallel
fi
if part tau; then
  for seed in 1 2 3; do
    workdir=$ROOT/flexible_rnnsearch_finetune/seed$seed
    [[ -n "$DRY_RUN" || -f "$workdir/eval_results.json" ]] || continue
    start taskset -c $(((seed - 1) % CORES)) "$PYTHON" -m nmt_jax.sweep tau \
      --workdir="$workdir" --beam_size=5 --select_on_dev
    if (((seed % CORES) == 0)); then in_parallel; fi
  done
  in_parallel
fi
if part record; then
  for results in "$ROOT"/*/seed*/eval_results.json; do
    [[ -f "$results" ]] || continue
    from=$(dirname "$results")
    run "$PYTHON" -m experiments.records "$from" "$RECORDS/${from#"$ROOT"/}"
  done
fi
if part tables; then
  for reference in global_general global_concat flexible_rnnsearch; do
    run "$PYTHON" -m nmt_jax.sweep aggregate --root="$RECORDS" \
      --paired_with="$reference" --markdown="$RECORDS/against_$reference.md"
  done
  # Every corpus's verdicts, by the README's rule.
  run "$PYTHON" -m experiments.paper_protocols.verdicts \
    --records="$(dirname "$RECORDS")" --markdown="$(dirname "$RECORDS")/verdicts.md"
fi
