#!/usr/bin/env bash
# Re-measures docs/performance.md: nmt_jax against OpenNMT-py on the Britz
# copy model (2-layer bi-LSTM encoder 2x128, 2-layer decoder 256, general
# attention, input feeding, batch 128), then each speed lever alone.
#
#   PEER_VENV=/tmp/peer_onmt PEER_SCRIPTS=DIR PEER_WORK=/tmp/onmt_work \
#     bash benchmarks/performance.sh OUT [--output=docs/performance.md] [--dry-run]
#
# PEER_SCRIPTS holds OpenNMT-py's benchmark wrappers (train_bench.py,
# translate_bench.py) and PEER_WORK its copy data and configs
# (data/L50/valid.src, runs/L50/train.yaml, ...): benchmarks/peer_setup.sh makes
# them. Without PEER_VENV the peer is skipped and its columns say so.
# Every timed run is pinned to core $CORE (default 0) and the toolkits
# alternate, so drifting load on a shared machine reaches both alike. JSON
# files go to OUT, and the page is written from them
# (`python -m benchmarks.performance OUT --output=...`, its words from
# benchmarks/page/*.md). --dry-run prints the commands instead, after the
# `cd` to the repository root they need.
# REPEATS (3) pairs per figure; PARTS (default "train decode all levers
# startup page") runs some parts only, and ONLY (names of runs, as in OUT)
# some runs only. ~2 h on 2 cores. A training
# repetition is STEPS (10) steps in the levers' in-process comparisons and
# PAIR_STEPS (27) in the runs paired with OpenNMT-py, whose figure is one
# window of 80 steps (50 at L = 100): 3 x 27 covers as many batches.
# PLATFORM=gpu times both toolkits on the GPU instead (a CUDA build of JAX
# here and of torch in PEER_VENV; OpenNMT-py with -gpu_ranks 0 / -gpu 0):
# nothing is pinned, the all-cores part is skipped and every training
# repetition is STEPS (100) steps.
set -euo pipefail

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; } # the header comment
error() { echo "error: $*" >&2; exit 2; }
OUT= DRY_RUN= PAGE=docs/performance.md
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    --output=*) PAGE=${arg#--output=} ;;
    -*) error "unknown argument '$arg'; see --help" ;;
    *) [[ -z "$OUT" ]] || error "one OUT directory, not '$OUT' and '$arg'"; OUT=$arg ;;
  esac
done
[[ -n "$OUT" ]] || error "give the directory for the JSON files: benchmarks/performance.sh OUT"
# The runs name configs/ and docs/ from the repository root: run from there,
# with OUT and --output as given from here.
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
if ! [[ "$PWD" -ef "$REPO_ROOT" ]]; then
  [[ "$OUT" == /* ]] || OUT="$PWD/$OUT"
  [[ "$PAGE" == /* || "$PAGE" == docs/performance.md ]] || PAGE="$PWD/$PAGE"
  cd "$REPO_ROOT"
fi
CORE=${CORE:-0}
REPEATS=${REPEATS:-3}
LENGTHS=${LENGTHS:-"50 100"}
PYTHON=${PYTHON:-python}
PARTS=" ${PARTS:-train decode all levers startup page} "
PLATFORM=${PLATFORM:-cpu}
case $PLATFORM in
  cpu) PEER_TRAIN_DEVICE=() PEER_DECODE_DEVICE=(-gpu -1) STEPS=${STEPS:-10}
    PAIR_STEPS=${PAIR_STEPS:-27} ;;
  gpu) PEER_TRAIN_DEVICE=(-world_size 1 -gpu_ranks 0) PEER_DECODE_DEVICE=(-gpu 0)
    PARTS=${PARTS/ all / } STEPS=${STEPS:-100} PAIR_STEPS=${PAIR_STEPS:-$STEPS} ;;
  *) error "PLATFORM=$PLATFORM: use cpu or gpu" ;;
esac
[[ -n "${PARTS// /}" ]] || \
  error "PARTS names nothing to run on a $PLATFORM ('all', the all-cores part, is for a CPU)"
PEER_VENV=${PEER_VENV:-}
# tcmalloc for the allocator levers (skipped when not installed).
TCMALLOC=${TCMALLOC-$(ls /usr/lib/*/libtcmalloc_minimal.so.4 2>/dev/null | head -n 1 || true)}
PEER_SCRIPTS=${PEER_SCRIPTS:-}
PEER_WORK=${PEER_WORK:-}
if [[ -n "$PEER_VENV" ]]; then
  for f in "$PEER_VENV/bin/python" "$PEER_SCRIPTS/train_bench.py" \
    "$PEER_SCRIPTS/translate_bench.py" "$PEER_WORK/runs/L50/train.yaml"; do
    [[ -f "$f" ]] || error "$f not found; set PEER_VENV, PEER_SCRIPTS and PEER_WORK (docs/performance.md)"
  done
fi
if [[ -n "$DRY_RUN" ]]; then
  # The commands name configs/ from the repository root: so does the dry run.
  printf 'cd %q\n' "$REPO_ROOT"
else
  mkdir -p "$OUT"
fi

part() { [[ "$PARTS" == *" $1 "* ]]; }
cores() { # the cores a run of $1 threads may use
  if [[ $1 == 1 ]]; then echo "$CORE"; else echo "0-$(($1 - 1))"; fi
}
pin() { # for $1 threads: PIN, the prefix that runs a command on their cores,
  # and THREADS, nmt_jax's flag for them (both empty on a GPU)
  PIN=() THREADS=()
  if [[ $PLATFORM == cpu ]]; then
    PIN=(taskset -c "$(cores "$1")") THREADS=(--threads="$1")
  fi
}
run() { # run NAME command...: output to OUT/NAME.log (or printed, --dry-run)
  local name=$1
  shift
  [[ -z "${ONLY:-}" || " $ONLY " == *" $name "* ]] || return 0
  if [[ -n "$DRY_RUN" ]]; then
    printf '%q ' "$@"
    echo
    return 0
  fi
  echo "=== $name ($(date +%T))"
  "$@" > "$OUT/$name.log" 2>&1 || { echo "failed: $OUT/$name.log"; tail -3 "$OUT/$name.log"; }
}
BRITZ=(--config.model.bidirectional=all --config.model.bridge=copy)
bench() { # bench train|decode L THREADS NAME [args...] (BENCH_ENV: env settings;
  # RUN_STEPS: steps per training repetition, STEPS unless set)
  local command=$1 length=$2 threads=$3 name=$4 steps=()
  shift 4
  pin "$threads"
  [[ $command == train ]] && steps=(--steps="${RUN_STEPS:-$STEPS}")
  run "$name" "${PIN[@]}" env ${BENCH_ENV:-} "$PYTHON" -m benchmarks.bench "$command" \
    --config="configs/global_general.py:copy$length" "${BRITZ[@]}" \
    "${THREADS[@]}" "${steps[@]}" --json="$OUT/$name.json" "$@"
}
peer_train() { # L THREADS NAME
  [[ -n "$PEER_VENV" ]] || return 0
  local length=$1 threads=$2 name=$3 window=80
  [[ $length -gt 50 ]] && window=50
  pin "$threads"
  run "$name" env OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" ${PEER_ENV:-} \
    "${PIN[@]}" "$PEER_VENV/bin/python" "$PEER_SCRIPTS/train_bench.py" \
    --threads "$threads" --json "$OUT/$name.json" --warmup 15 --window $window -- \
    -config "$PEER_WORK/runs/L$length/train.yaml" -train_steps $((15 + window + 1)) \
    -save_model "$OUT/peer_model_L$length" -save_checkpoint_steps 1000000 -report_every 20 \
    "${PEER_TRAIN_DEVICE[@]}"
}
peer_decode() { # L THREADS BEAM NAME
  [[ -n "$PEER_VENV" ]] || return 0
  local length=$1 threads=$2 beam=$3 name=$4
  # The checkpoint the latest training run of this L saved (each run writes
  # the same file; EOS is blocked, so which one does not change the timing).
  local model="$OUT/peer_model_L${length}_step_$((15 + (length > 50 ? 50 : 80) + 1)).pt"
  pin "$threads"
  run "$name" env TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 OMP_NUM_THREADS="$threads" \
    MKL_NUM_THREADS="$threads" "${PIN[@]}" "$PEER_VENV/bin/python" \
    "$PEER_SCRIPTS/translate_bench.py" --threads "$threads" --json "$OUT/$name.json" -- \
    -model "$model" -src "$PEER_WORK/data/L$length/valid.src" -output "$OUT/$name.txt" \
    -beam_size "$beam" -batch_size 64 -batch_type sents -max_length_ratio 1.0 \
    -min_length 250 "${PEER_DECODE_DEVICE[@]}" -seed 1234
}
kinds() { # kinds NAME CONFIG L [args...]: CONFIG's decoding against global's
  local name=$1 config=$2 length=$3 plain=()
  shift 3
  pin 1
  # On a GPU the decoders' default is CUDA graphs: runs not named for them
  # launch kernel by kernel, as they were first measured.
  [[ $PLATFORM == gpu && $name != *cuda_graphs* ]] && \
    plain=(--config.decode.compiler_options= --compare.decode.compiler_options=)
  run "$name" "${PIN[@]}" "$PYTHON" -m benchmarks.bench decode --config="$config" \
    --compare="configs/global_general.py:copy$length" "${THREADS[@]}" --modes=greedy,beam \
    --sentences_per_batch=64 --num_sentences=256 \
    --repeats=5 --json="$OUT/$name.json" "${plain[@]}" "$@"
}
# 64 sentences per decoding batch in both modes, as OpenNMT-py's
# -batch_size 64 -batch_type sents (beam search: 640 hypotheses).
DECODE=(--modes=greedy,beam --config.decode.beam_size=10 --sentences_per_batch=64 --repeats=3)
OTHER=(--compare=configs/global_general.py:copy50 --compare.model.bidirectional=all
  --compare.model.bridge=copy)

# 1. One thread: training, then decoding, alternating toolkits per repeat.
if part train; then
  for r in $(seq 1 "$REPEATS"); do
    for L in $LENGTHS; do
      peer_train "$L" 1 "peer_train_L${L}_t1_r$r"
      RUN_STEPS=$PAIR_STEPS bench train "$L" 1 "train_L${L}_t1_r$r" --repeats=3
    done
  done
  # Where the step's time goes: the longest bucket's ops, traced.
  bench ops 50 1 ops_L50 --steps=3
fi
if part decode; then
  for r in $(seq 1 "$REPEATS"); do
    for L in $LENGTHS; do
      for beam in 1 10; do peer_decode "$L" 1 $beam "peer_decode_L${L}_b${beam}_t1_r$r"; done
      bench decode "$L" 1 "decode_L${L}_t1_r$r" "${DECODE[@]}"
    done
  done
  # Where greedy decoding's time goes at the longer length.
  bench ops 100 1 ops_greedy_L100 --trace=greedy --steps=3 --sentences_per_batch=64
fi
best_pairs() { # L THREADS: REPEATS pairs, OpenNMT-py then nmt_jax with the
  # two opt-in training levers (16 fitted buckets, glibc keeping freed memory)
  local length=$1 threads=$2 r
  for r in $(seq 1 "$REPEATS"); do
    peer_train "$length" "$threads" "peer_best_train_L${length}_t${threads}_r$r"
    RUN_STEPS=$PAIR_STEPS BENCH_ENV=NMT_JAX_KEEP_FREED_MEMORY=1 bench train "$length" \
      "$threads" "best_train_L${length}_t${threads}_r$r" --repeats=3 \
      --config.data.bucketing=fitted --config.data.num_buckets=16
  done
}
# 2. All cores.
ALL=$(nproc)
if part all; then
  # Training REPEATS pairs, decoding one run of each (the peer decodes the
  # checkpoint of its latest training run).
  for L in $LENGTHS; do
    for r in $(seq 1 "$REPEATS"); do
      peer_train "$L" "$ALL" "peer_train_L${L}_t${ALL}_r$r"
      RUN_STEPS=$PAIR_STEPS bench train "$L" "$ALL" "train_L${L}_t${ALL}_r$r" --repeats=3
    done
    for beam in 1 10; do peer_decode "$L" "$ALL" $beam "peer_decode_L${L}_b${beam}_t${ALL}_r1"; done
    bench decode "$L" "$ALL" "decode_L${L}_t${ALL}_r1" "${DECODE[@]}"
    best_pairs "$L" "$ALL"
  done
fi
# 3. Levers, each alone against the default in one process (alternating).
if part levers; then
  bench train 50 1 lever_fitted16 --repeats=3 "${OTHER[@]}" \
    --config.data.bucketing=fitted --config.data.num_buckets=16
  bench train 50 1 lever_fitted8 --repeats=3 "${OTHER[@]}" \
    --config.data.bucketing=fitted --config.data.num_buckets=8
  bench decode 50 1 lever_gate_table "${DECODE[@]}" "${OTHER[@]}" \
    --config.decode.gate_table=on --compare.decode.gate_table=off \
    --compare.decode.beam_size=10
  bench decode 50 1 lever_model_gate_table "${DECODE[@]}" "${OTHER[@]}" \
    --compare.model.gate_table=off --compare.decode.beam_size=10
  # In training the table applies without dropout only (it drops embeddings).
  bench train 50 1 lever_model_gate_table_train --repeats=3 "${OTHER[@]}" \
    --config.model.dropout=0 --compare.model.dropout=0 --compare.model.gate_table=off
  bench train 50 1 lever_explicit_weight_grads --repeats=3 "${OTHER[@]}" \
    --compare.model.explicit_weight_grads=false
  bench train 50 1 lever_hoist_weight_grads --repeats=3 "${OTHER[@]}" \
    --compare.model.hoist_weight_grads=false
  bench train 50 1 lever_dropout_rng --repeats=5 "${OTHER[@]}" \
    --config.train.dropout_rng=philox2x32
  # The allocator is set per process: separate processes, alternating.
  for r in $(seq 1 "$REPEATS"); do
    BENCH_ENV=NMT_JAX_KEEP_FREED_MEMORY=1 bench train 50 1 \
      "lever_keep_memory_on_r$r" --repeats=3
    bench train 50 1 "lever_keep_memory_off_r$r" --repeats=3
    if [[ -n "$TCMALLOC" ]]; then
      BENCH_ENV=LD_PRELOAD=$TCMALLOC bench train 50 1 "lever_tcmalloc_on_r$r" --repeats=3
      bench train 50 1 "lever_tcmalloc_off_r$r" --repeats=3
      PEER_ENV=LD_PRELOAD=$TCMALLOC peer_train 50 1 "peer_lever_tcmalloc_on_r$r"
      peer_train 50 1 "peer_lever_tcmalloc_off_r$r"
    fi
  done
  # Two opt-in training levers at once (16 fitted buckets, glibc keeping
  # freed memory) against OpenNMT-py, in pairs of processes: the fastest
  # CPU training measured (Philox dropout masks on top measured no faster).
  if [[ $PLATFORM == cpu ]]; then
    for L in $LENGTHS; do best_pairs "$L" 1; done
  fi
  bench train 50 1 lever_bfloat16 --repeats=3 "${OTHER[@]}" --config.model.dtype=bfloat16
  bench train 50 1 lever_scan_unroll2 --repeats=3 "${OTHER[@]}" --config.model.scan_unroll=2
  bench decode 50 1 lever_decode_unroll4 "${DECODE[@]}" "${OTHER[@]}" \
    --config.decode.unroll=4 --compare.decode.beam_size=10
  # The query-side general score where the keys no longer fit in cache.
  bench decode 100 1 lever_project_query_L100 "${DECODE[@]}" \
    --compare=configs/global_general.py:copy100 --compare.model.bidirectional=all \
    --compare.model.bridge=copy --compare.model.project_query=false \
    --compare.decode.beam_size=10
  # Beam search in batches of 64 sentences (640 hypotheses) against 64
  # hypotheses (6 sentences): decode.batch_size counts hypotheses.
  bench decode 50 1 lever_beam_sentences64 --modes=beam --config.decode.beam_size=10 \
    --config.decode.batch_size=640 --repeats=3 "${OTHER[@]}" \
    --compare.decode.beam_size=10 --compare.decode.batch_size=64
  bench train 50 1 lever_project_query_train --repeats=3 "${OTHER[@]}" \
    --compare.model.project_query=false
  # Attention's cost at long sources, against global general attention:
  # memory K = 64 at L = 200, flexible at Shu & Nakayama's tau = 1.2, L = 150.
  kinds kinds_L200 configs/memory_k64.py:copy200 200
  kinds kinds_flexible_L150 configs/flexible.py:copy150 150 \
    --config.model.attention.tau=1.2
  # The same at sources of about L tokens (lengths L - 10 .. L, not 1 .. L).
  LONG200=(--config.data.min_length=190 --compare.data.min_length=190)
  LONG150=(--config.data.min_length=140 --compare.data.min_length=140)
  kinds kinds_L200_long configs/memory_k64.py:copy200 200 "${LONG200[@]}"
  kinds kinds_flexible_L150_long configs/flexible.py:copy150 150 \
    --config.model.attention.tau=1.2 "${LONG150[@]}"
  # No attention against global at 190-200 tokens: the floor of any kind.
  kinds kinds_none_L200_long configs/no_attention.py:copy200 200 "${LONG200[@]}"
  # Flexible against global in flexible's decoder (query h_{t-1}, concat
  # score): the attention kinds alone.
  kinds kinds_flexible_L150_same_decoder configs/flexible.py:copy150 150 \
    --config.model.attention.tau=1.2 "${LONG150[@]}" --compare.model.query=previous \
    --compare.model.attention.score=concat
  # Flexible in Shu & Nakayama's own base model (RNNsearch: no input feeding)
  # against Luong's global general: each model as published.
  kinds kinds_flexible_L150_rnnsearch_long configs/flexible.py:copy150,rnnsearch 150 \
    --config.model.attention.tau=1.2 "${LONG150[@]}"
  # And against global attention in that model: the paper's own comparison.
  kinds kinds_flexible_L150_rnnsearch_same_model configs/flexible.py:copy150,rnnsearch 150 \
    --config.model.attention.tau=1.2 "${LONG150[@]}" --compare.model.query=previous \
    --compare.model.attention.score=concat --compare.model.input_feeding=false
  if [[ $PLATFORM == gpu ]]; then
    # The training and search loops as CUDA graphs: with WHILE and
    # CONDITIONAL among XLA's command buffers a loop runs on the device
    # instead of launching every kernel of every step from the host.
    GRAPHS=--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE
    bench train 50 1 lever_cuda_graphs_train --repeats=3 "${OTHER[@]}" \
      --config.compiler_options="$GRAPHS"
    # The same without WHILE and CONDITIONAL: kernels as graphs, loops on the host.
    bench train 50 1 lever_cuda_graphs_train_no_loops --repeats=3 "${OTHER[@]}" \
      --config.compiler_options="${GRAPHS%,CONDITIONAL,WHILE}"
    # decode.compiler_options' default (the same option) against none.
    bench decode 50 1 lever_cuda_graphs_decode "${DECODE[@]}" "${OTHER[@]}" \
      --compare.decode.compiler_options= --compare.decode.beam_size=10
    kinds kinds_L200_long_cuda_graphs configs/memory_k64.py:copy200 200 "${LONG200[@]}" \
      --config.compiler_options="$GRAPHS" --compare.compiler_options="$GRAPHS"
    # Flexible's width switch is a CONDITIONAL: inside a command buffer its
    # branch index stays on the device.
    kinds kinds_flexible_L150_long_cuda_graphs configs/flexible.py:copy150 150 \
      --config.model.attention.tau=1.2 "${LONG150[@]}" \
      --config.compiler_options="$GRAPHS" --compare.compiler_options="$GRAPHS"
    # Flexible in RNNsearch against global concat in that model, as graphs.
    kinds kinds_flexible_L150_rnnsearch_same_model_cuda_graphs \
      configs/flexible.py:copy150,rnnsearch 150 --config.model.attention.tau=1.2 \
      "${LONG150[@]}" --compare.model.query=previous --compare.model.attention.score=concat \
      --compare.model.input_feeding=false \
      --config.compiler_options="$GRAPHS" --compare.compiler_options="$GRAPHS"
    # 512 sentences per search step, where attention's share of a step grows.
    kinds kinds_L200_long_batch512 configs/memory_k64.py:copy200 200 "${LONG200[@]}" \
      --sentences_per_batch=512 --num_sentences=1000
    kinds kinds_L200_long_batch512_cuda_graphs configs/memory_k64.py:copy200 200 \
      "${LONG200[@]}" --sentences_per_batch=512 --num_sentences=1000 \
      --config.compiler_options="$GRAPHS" --compare.compiler_options="$GRAPHS"
    kinds kinds_flexible_L150_long_batch512_cuda_graphs configs/flexible.py:copy150 150 \
      --config.model.attention.tau=1.2 "${LONG150[@]}" --sentences_per_batch=512 \
      --num_sentences=1000 \
      --config.compiler_options="$GRAPHS" --compare.compiler_options="$GRAPHS"
  fi
  for chunk in 0 10; do
    run "train_memory_chunk$chunk" "$PYTHON" -m benchmarks.bench train_memory \
      --config=configs/memory_k64.py:wmt17_de_en --config.train.loss_chunk=$chunk \
      --json="$OUT/train_memory_chunk$chunk.json"
  done
fi
# 4. Compilation cache: the first training step and translation, cold and
# warm (new processes, as a user runs them, on all cores).
if part startup; then
  bench startup 50 "$ALL" startup_L50 --steps=20 --repeats=3
fi
if part page; then
  if [[ -n "$DRY_RUN" ]]; then
    printf '%q ' "$PYTHON" -m benchmarks.performance "$OUT" --output="$PAGE"
    echo
  else
    "$PYTHON" -m benchmarks.performance "$OUT" --output="$PAGE"
  fi
fi
