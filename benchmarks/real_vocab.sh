#!/usr/bin/env bash
# nmt_jax against OpenNMT-py at real vocabulary sizes, where the output layer
# costs what it costs in translation: a WMT-shaped synthetic corpus (Zipfian
# pseudo-words, news-like lengths) with a shared SentencePiece BPE of
# V = 8k, 16k and 32k pieces, and the gettext corpus (English->German, a 16k
# BPE, or the most SentencePiece accepts there). Both toolkits read the same
# piece files and train the same model: a 1-layer bidirectional LSTM encoder
# (OpenNMT-py's brnn), a 1-layer decoder, 256 units, embeddings 256, general
# attention, input feeding, dropout 0.2, Adam 1e-3, clip 5, batches of 64
# sentences, per-side vocabularies.
#
#   PEER_VENV=/tmp/peer_onmt PEER_SCRIPTS=DIR bash benchmarks/real_vocab.sh OUT [--dry-run]
#
# PEER_SCRIPTS holds OpenNMT-py's benchmark wrappers (train_bench.py,
# translate_bench.py; benchmarks/performance.sh reads the same ones), PEER_VENV
# OpenNMT-py 3.5.1 with torch (benchmarks/peer_setup.sh). Without PEER_VENV
# the peer is skipped. Parts (PARTS, default "data train decode all kinds
# profile summary"):
#   data     per corpus in CORPORA (default "V8000 V16000 V32000 gettext"):
#            DATA/<corpus>/pieces.{train,dev}.{src,tgt} (PAIRS (100000)
#            synthetic pairs; training pairs over 50 pieces dropped), the
#            nmt_jax vocabularies and encoded cache (DATA/<corpus>/nmt_jax,
#            `nmt_jax.main --mode=prepare`), OpenNMT-py's train.yaml and
#            vocabularies (DATA/<corpus>/onmt). DATA defaults to OUT/data;
#            corpora and OpenNMT-py vocabularies already there are kept.
#   train    per corpus, REPEATS (3) pairs of processes on core CORE (0),
#            OpenNMT-py (WARMUP (15) steps, then a window of WINDOW (80))
#            then nmt_jax (3 repetitions of STEPS (27) steps, shipped
#            defaults), one thread each; nmt_jax's JSON carries `vs_peer`
#            against the peer's runs so far (--peer).
#   decode   per corpus, REPEATS pairs: OpenNMT-py greedy
#            (-random_sampling_topk 1) and beam 10, then nmt_jax's greedy and
#            beam 10 in one process, DECODE_SENTENCES (512) dev sentences in
#            batches of 64 sentences; EOS blocked on both sides (nmt_jax:
#            random weights, every sentence runs to its source length;
#            OpenNMT-py: the checkpoint of its latest training run,
#            -min_length 250 -max_length_ratio 1.0: the longest source of
#            its batch + 5). Needs the train part's peer checkpoints.
#   all      at V16000 on all cores: REPEATS training pairs, one decoding pair.
#   kinds    at V16000: memory K = 32 and 64, local-p, flexible (tau TAU,
#            1.2) and no attention against global general, greedy and beam
#            10, KIND_SENTENCES (512) dev sentences (real source lengths),
#            batches of 64 sentences, in one process each (alternating).
#   profile  at V16000: `bench ops` of training steps (where a step's time
#            goes: output layer, loss, embeddings, LSTM, attention), and of
#            greedy and beam-10 decoding calls.
#   summary  OUT/summary.txt: the ratios per pair of runs.
# JSON and logs go to OUT (names as peer_train_V16000_t1_r1.json,
# train_V16000_t1_r1.json). --dry-run prints the commands instead, after the
# `cd` to the repository root they need. PYTHON: nmt_jax's interpreter
# (python). A smoke run: CORPORA=V8000 PAIRS=3000 REPEATS=1 WARMUP=2 WINDOW=3
# STEPS=2 DECODE_SENTENCES=64 KIND_SENTENCES=64 PARTS="data train decode
# kinds profile summary". The whole default run takes about 3.5 hours on a
# quiet 2-core machine (data 0.5 h, train 1.25 h, decode 0.75 h, all 0.3 h,
# kinds 0.6 h, profile 0.15 h; V = 32k is the costliest).
set -euo pipefail

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; } # the header comment
error() { echo "error: $*" >&2; exit 2; }
OUT= DRY_RUN=
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    -*) error "unknown argument '$arg'; see --help" ;;
    *) [[ -z "$OUT" ]] || error "one OUT directory, not '$OUT' and '$arg'"; OUT=$arg ;;
  esac
done
[[ -n "$OUT" ]] || error "give the directory for the JSON files: benchmarks/real_vocab.sh OUT"
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
[[ "$OUT" == /* ]] || OUT="$PWD/$OUT"
DATA=${DATA:-$OUT/data}
[[ "$DATA" == /* ]] || DATA="$PWD/$DATA"
cd "$REPO_ROOT"
CORE=${CORE:-0}
REPEATS=${REPEATS:-3}
PARTS=" ${PARTS:-data train decode all kinds profile summary} "
CORPORA=${CORPORA:-V8000 V16000 V32000 gettext}
PAIRS=${PAIRS:-100000}
GETTEXT_VOCAB=${GETTEXT_VOCAB:-16000}
WARMUP=${WARMUP:-15}
WINDOW=${WINDOW:-80}
STEPS=${STEPS:-27}
DECODE_SENTENCES=${DECODE_SENTENCES:-512}
KIND_SENTENCES=${KIND_SENTENCES:-512}
TAU=${TAU:-1.2}
PYTHON=${PYTHON:-python}
PEER_VENV=${PEER_VENV:-}
PEER_SCRIPTS=${PEER_SCRIPTS:-}
ALL=$(nproc)
for c in $CORPORA; do
  [[ $c =~ ^V[0-9]+$ || $c == gettext ]] || error "CORPORA: '$c' is neither V<pieces> nor gettext"
done
if [[ -n "$PEER_VENV" ]]; then
  for f in "$PEER_VENV/bin/python" "$PEER_VENV/bin/onmt_build_vocab" \
    "$PEER_SCRIPTS/train_bench.py" "$PEER_SCRIPTS/translate_bench.py"; do
    [[ -f "$f" ]] || error "$f not found; set PEER_VENV and PEER_SCRIPTS (see --help)"
  done
fi
if [[ -n "$DRY_RUN" ]]; then
  printf 'cd %q\n' "$REPO_ROOT"
else
  mkdir -p "$OUT"
fi

part() { [[ "$PARTS" == *" $1 "* ]]; }
show() { printf '%q ' "$@"; echo; }
pin() { # for $1 threads: PIN, the prefix that runs a command on their cores
  if [[ $1 == 1 ]]; then PIN=(taskset -c "$CORE"); else PIN=(taskset -c "0-$(($1 - 1))"); fi
}
step() { # step NAME command...: a preparation step, stops the script on failure
  local name=$1
  shift
  if [[ -n "$DRY_RUN" ]]; then show "$@"; return 0; fi
  echo "=== $name ($(date +%T))"
  "$@" > "$OUT/$name.log" 2>&1 || { tail -5 "$OUT/$name.log"; error "$name failed: $OUT/$name.log"; }
}
run() { # run NAME command...: a timed run, output to OUT/NAME.log
  local name=$1
  shift
  if [[ -n "$DRY_RUN" ]]; then show "$@"; return 0; fi
  echo "=== $name ($(date +%T))"
  "$@" > "$OUT/$name.log" 2>&1 || { echo "failed: $OUT/$name.log"; tail -3 "$OUT/$name.log"; }
}
exists() { [[ -n "$DRY_RUN" ]] || compgen -G "$1" > /dev/null; }
# nmt_jax's flags for corpus $2's model, on side $1 (config or compare).
model_flags() {
  local side=$1 corpus=$2
  FLAGS=(--$side.model.bidirectional=all --$side.model.bridge=copy
    --$side.model.num_encoder_layers=1 --$side.model.num_decoder_layers=1
    --$side.model.hidden_size=256 --$side.model.embed_size=256
    --$side.train.batch_size=64 --$side.train.learning_rate=1e-3
    --$side.data.max_length=50 --$side.data.name="text:$DATA/$corpus/pieces"
    --$side.data.source_lang=src --$side.data.target_lang=tgt
    --$side.data.vocab.kind=word --$side.data.vocab.size=0
    --$side.data.vocab.shared=false --$side.data.segmentation=sentencepiece
    --$side.decode.beam_size=10)
}
# `benchmarks.bench` whose --data_workdir serves train, decode and ops.
BENCH=(-m benchmarks.bench)
bench() { # bench train|decode|ops CORPUS THREADS NAME [args...] (CONFIG: the
  # config file, configs/global_general.py unless set)
  local command=$1 corpus=$2 threads=$3 name=$4 config=${CONFIG:-configs/global_general.py}
  shift 4
  pin "$threads"
  model_flags config "$corpus"
  run "$name" "${PIN[@]}" "$PYTHON" "${BENCH[@]}" "$command" \
    --config="$config" "${FLAGS[@]}" \
    --data_workdir="$DATA/$corpus/nmt_jax" --threads="$threads" \
    --json="$OUT/$name.json" "$@"
}
peer_train() { # CORPUS THREADS NAME
  [[ -n "$PEER_VENV" ]] || return 0
  local corpus=$1 threads=$2 name=$3
  pin "$threads"
  run "$name" env OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" \
    "${PIN[@]}" "$PEER_VENV/bin/python" "$PEER_SCRIPTS/train_bench.py" \
    --threads "$threads" --json "$OUT/$name.json" --warmup "$WARMUP" --window "$WINDOW" -- \
    -config "$DATA/$corpus/onmt/train.yaml" -train_steps $((WARMUP + WINDOW + 1)) \
    -save_model "$OUT/peer_model_$corpus" -save_checkpoint_steps 1000000 -report_every 20
}
peer_decode() { # CORPUS THREADS BEAM NAME
  [[ -n "$PEER_VENV" ]] || return 0
  local corpus=$1 threads=$2 beam=$3 name=$4 greedy=()
  # The checkpoint of the latest training run on this corpus (EOS is
  # blocked: which run's weights does not change the work).
  local model="$OUT/peer_model_${corpus}_step_$((WARMUP + WINDOW + 1)).pt"
  # OpenNMT-py 3.5.1 samples at -beam_size 1 unless told to keep the best.
  [[ $beam == 1 ]] && greedy=(-random_sampling_topk 1)
  pin "$threads"
  run "$name" env TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 OMP_NUM_THREADS="$threads" \
    MKL_NUM_THREADS="$threads" "${PIN[@]}" "$PEER_VENV/bin/python" \
    "$PEER_SCRIPTS/translate_bench.py" --threads "$threads" --json "$OUT/$name.json" -- \
    -model "$model" -src "$DATA/$corpus/decode.src" -output "$OUT/$name.txt" \
    -beam_size "$beam" "${greedy[@]}" -batch_size 64 -batch_type sents \
    -max_length_ratio 1.0 -min_length 250 -gpu -1 -seed 1234
}
# nmt_jax's decoding of DECODE_SENTENCES in batches of 64 sentences.
DECODE=(--modes=greedy,beam --sentences_per_batch=64 --num_sentences="$DECODE_SENTENCES" --repeats=1)
train_pair() { # CORPUS THREADS R
  local corpus=$1 threads=$2 r=$3 peer=()
  peer_train "$corpus" "$threads" "peer_train_${corpus}_t${threads}_r$r"
  local runs="$OUT/peer_train_${corpus}_t${threads}_r*.json"
  [[ -n "$PEER_VENV" ]] && exists "$runs" && peer=(--peer="$runs")
  bench train "$corpus" "$threads" "train_${corpus}_t${threads}_r$r" \
    --steps="$STEPS" --repeats=3 "${peer[@]}"
}
decode_pair() { # CORPUS THREADS R
  local corpus=$1 threads=$2 r=$3 peer=() beam
  for beam in 1 10; do
    peer_decode "$corpus" "$threads" $beam "peer_decode_${corpus}_b${beam}_t${threads}_r$r"
  done
  local runs="$OUT/peer_decode_${corpus}_b*_t${threads}_r*.json"
  [[ -n "$PEER_VENV" ]] && exists "$runs" && peer=(--peer="$runs")
  bench decode "$corpus" "$threads" "decode_${corpus}_t${threads}_r$r" "${DECODE[@]}" "${peer[@]}"
}

# 1. The corpora, vocabularies and configs.
if part data; then
  for corpus in $CORPORA; do
    dir=$DATA/$corpus
    if [[ -n "$DRY_RUN" || ! -f "$dir/manifest.json" ]]; then
      if [[ $corpus == gettext ]]; then
        step "data_${corpus}_corpus" "$PYTHON" -m experiments.corpora.gettext_catalogues \
          --output="$DATA/gettext_text" --lang=de
        step "data_${corpus}_pieces" "$PYTHON" -m benchmarks.real_vocab pieces \
          --corpus="$DATA/gettext_text/corpus" --source_lang=en --target_lang=de \
          --output="$dir" --vocab_size="$GETTEXT_VOCAB"
      else
        step "data_${corpus}_pieces" "$PYTHON" -m benchmarks.real_vocab synthetic \
          --output="$dir" --vocab_size="${corpus#V}" --pairs="$PAIRS"
      fi
    fi
    # The sentences both toolkits decode (nmt_jax: --num_sentences, the
    # first ones of the dev split).
    if [[ -n "$DRY_RUN" ]]; then
      echo "head -n $DECODE_SENTENCES $(printf %q "$dir/pieces.dev.src") > $(printf %q "$dir/decode.src")"
    else
      head -n "$DECODE_SENTENCES" "$dir/pieces.dev.src" > "$dir/decode.src"
    fi
    model_flags config "$corpus"
    step "data_${corpus}_nmt_jax" "$PYTHON" -m nmt_jax.main --mode=prepare \
      --config=configs/global_general.py "${FLAGS[@]}" --workdir="$dir/nmt_jax"
    if [[ -n "$PEER_VENV" ]]; then
      if [[ -n "$DRY_RUN" ]]; then
        echo "mkdir -p $(printf %q "$dir/onmt")"
        echo "$(show "$PYTHON" -m benchmarks.real_vocab onmt_config --data="$dir" \
          --run="$dir/onmt")> $(printf %q "$dir/onmt/train.yaml")"
      else
        mkdir -p "$dir/onmt"
        "$PYTHON" -m benchmarks.real_vocab onmt_config --data="$dir" --run="$dir/onmt" \
          > "$dir/onmt/train.yaml"
      fi
      if [[ -n "$DRY_RUN" || ! -s "$dir/onmt/vocab.src" || ! -s "$dir/onmt/vocab.tgt" ]]; then
        step "data_${corpus}_onmt_vocab" "$PEER_VENV/bin/onmt_build_vocab" \
          -config "$dir/onmt/train.yaml" -n_sample -1
      fi
    fi
  done
fi
# 2. Training, one thread, the toolkits alternating.
if part train; then
  for r in $(seq 1 "$REPEATS"); do
    for corpus in $CORPORA; do train_pair "$corpus" 1 "$r"; done
  done
fi
# 3. Decoding, one thread (the peer decodes its latest training checkpoint).
if part decode; then
  for r in $(seq 1 "$REPEATS"); do
    for corpus in $CORPORA; do decode_pair "$corpus" 1 "$r"; done
  done
fi
# 4. All cores at V = 16k.
if part all; then
  for r in $(seq 1 "$REPEATS"); do train_pair V16000 "$ALL" "$r"; done
  decode_pair V16000 "$ALL" 1
fi
# 5. Attention kinds against global general at V = 16k, real source lengths.
KIND=V16000
[[ " $CORPORA " == *" V16000 "* ]] || KIND=${CORPORA%% *}
kinds() { # NAME CONFIG [args...]
  local name=$1 config=$2
  shift 2
  model_flags compare "$KIND"
  CONFIG=$config bench decode "$KIND" 1 "$name" --compare=configs/global_general.py \
    "${FLAGS[@]}" --modes=greedy,beam --sentences_per_batch=64 \
    --num_sentences="$KIND_SENTENCES" --repeats=3 "$@"
}
if part kinds; then
  kinds "kinds_memory_k32_$KIND" configs/memory_k32.py
  kinds "kinds_memory_k64_$KIND" configs/memory_k64.py
  kinds "kinds_local_p_$KIND" configs/local_p.py
  kinds "kinds_flexible_$KIND" configs/flexible.py --config.model.attention.tau="$TAU"
  kinds "kinds_no_attention_$KIND" configs/no_attention.py
fi
# 6. Where a step's time goes at a real vocabulary.
if part profile; then
  bench ops "$KIND" 1 "ops_train_$KIND" --steps=3
  bench ops "$KIND" 1 "ops_greedy_$KIND" --trace=greedy --steps=3 --sentences_per_batch=64
  bench ops "$KIND" 1 "ops_beam_$KIND" --trace=beam --steps=2 --sentences_per_batch=64
fi
if part summary; then
  if [[ -n "$DRY_RUN" ]]; then
    echo "$(show "$PYTHON" -m benchmarks.real_vocab summary "$OUT")> $(printf %q "$OUT/summary.txt")"
  else
    "$PYTHON" -m benchmarks.real_vocab summary "$OUT" | tee "$OUT/summary.txt"
  fi
fi
