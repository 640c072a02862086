#!/usr/bin/env bash
# Builds what benchmarks/performance.sh needs to time OpenNMT-py beside nmt_jax:
# PEER_VENV, a virtual environment with OpenNMT-py 3.5.1 and torch, and
# PEER_WORK, the copy data (L = 50 and 100), OpenNMT-py's training configs
# and vocabularies, from the peer's scripts in PEER_SCRIPTS
# (gen_copy_data.py, make_config.py; train_bench.py and translate_bench.py
# are read later by benchmarks/performance.sh).
#
#   PEER_SCRIPTS=DIR PEER_VENV=/tmp/peer_onmt PEER_WORK=/tmp/onmt_work \
#     bash benchmarks/peer_setup.sh [--dry-run]
#
# OpenNMT-py 3.5.1 declares torch<2.3 but trains and translates with newer
# torch: torch is installed first (TORCH: a pip requirement or a wheel file,
# default "torch"; on a GPU machine a CUDA build), then OpenNMT-py with
# --no-deps and the packages it imports. SYSTEM_TORCH=1 makes the
# environment see python3's packages and uses the torch installed there (a
# GPU machine that has one, also in a virtual environment of its own).
# WHEELS=DIR installs from the wheels in DIR alone (a machine without
# internet; see launch/README.md for how to fetch them). Steps already done
# are skipped, so the command can be run again after a failure. --dry-run
# prints the commands.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO_ROOT/launch/common.sh"

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; } # the header comment
for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    *) die "unknown argument '$arg'; see --help" ;;
  esac
done
for name in PEER_SCRIPTS PEER_VENV PEER_WORK; do
  [[ -n "${!name:-}" ]] || die "set $name (see --help)"
done
for f in gen_copy_data.py make_config.py; do
  [[ -f "$PEER_SCRIPTS/$f" ]] || die "$PEER_SCRIPTS/$f not found; set PEER_SCRIPTS to the folder of OpenNMT-py's benchmark scripts"
done
TORCH=${TORCH:-torch}
PY=$PEER_VENV/bin/python
PIP=(-m pip install -q)
if [[ -n "${WHEELS:-}" ]]; then
  [[ -d "$WHEELS" ]] || die "WHEELS=$WHEELS is not a directory; point it at the wheels fetched for this machine (launch/README.md)"
  PIP+=(--no-index --find-links "$WHEELS")
fi
# Imported by OpenNMT-py's transforms at import time.
ONMT_IMPORTS=(configargparse pyyaml six sacrebleu "pyonmttok>=1.37,<2" spacy
  pyahocorasick rapidfuzz fasttext-wheel)

ADD_OWN_SITE='import site, sys
if sys.prefix != sys.base_prefix:
    v = sys.version_info
    pth = f"{sys.argv[1]}/lib/python{v[0]}.{v[1]}/site-packages/system_torch.pth"
    open(pth, "w").write("\n".join(site.getsitepackages()) + "\n")'
if [[ ! -x "$PY" ]]; then
  if [[ "${SYSTEM_TORCH:-0}" == 1 ]]; then
    run python3 -m venv --system-site-packages "$PEER_VENV"
    # Where python3 is itself a virtual environment's (GPU images often keep
    # torch in one), --system-site-packages reaches only the interpreter it
    # was made from: a .pth file adds python3's own site-packages.
    run python3 -c "$ADD_OWN_SITE" "$PEER_VENV"
  else
    run python3 -m venv "$PEER_VENV"
  fi
fi
if [[ "${SYSTEM_TORCH:-0}" == 1 ]]; then
  [[ "$DRY_RUN" == 1 ]] || "$PY" -c 'import torch' 2>/dev/null || \
    die "SYSTEM_TORCH=1 but $PY cannot import torch; install it, or leave SYSTEM_TORCH out and set TORCH"
elif [[ "$DRY_RUN" == 1 ]] || ! "$PY" -c 'import torch' 2>/dev/null; then
  run "$PY" "${PIP[@]}" "$TORCH"
fi
if [[ "$DRY_RUN" == 1 ]] || ! "$PY" -c 'import onmt' 2>/dev/null; then
  run "$PY" "${PIP[@]}" --no-deps opennmt-py==3.5.1
  run "$PY" "${PIP[@]}" "${ONMT_IMPORTS[@]}"
fi
for L in 50 100; do
  if [[ "$DRY_RUN" == 1 || ! -f "$PEER_WORK/data/L$L/vocab.txt" ]]; then
    run "$PY" "$PEER_SCRIPTS/gen_copy_data.py" --out "$PEER_WORK/data" --L "$L"
  fi
  run mkdir -p "$PEER_WORK/runs/L$L"
  if [[ "$DRY_RUN" == 1 || ! -f "$PEER_WORK/runs/L$L/train.yaml" ]]; then
    if [[ "$DRY_RUN" == 1 ]]; then
      echo "$(quote "$PY" "$PEER_SCRIPTS/make_config.py" --data "$PEER_WORK/data/L$L" \
        --run "$PEER_WORK/runs/L$L") > $(quote "$PEER_WORK/runs/L$L/train.yaml")"
    else
      "$PY" "$PEER_SCRIPTS/make_config.py" --data "$PEER_WORK/data/L$L" \
        --run "$PEER_WORK/runs/L$L" > "$PEER_WORK/runs/L$L/train.yaml.part"
      mv "$PEER_WORK/runs/L$L/train.yaml.part" "$PEER_WORK/runs/L$L/train.yaml"
    fi
  fi
  if [[ "$DRY_RUN" == 1 ]] || ! [[ -f "$PEER_WORK/runs/L$L/vocab.src" && -f "$PEER_WORK/runs/L$L/vocab.tgt" ]]; then
    run "$PEER_VENV/bin/onmt_build_vocab" -config "$PEER_WORK/runs/L$L/train.yaml" -n_sample -1
  fi
done
[[ "$DRY_RUN" == 1 ]] || echo "ready: PEER_VENV=$PEER_VENV PEER_WORK=$PEER_WORK PEER_SCRIPTS=$PEER_SCRIPTS"
