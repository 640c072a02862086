# Shared by the launch scripts: errors, dry runs, quoting. Source it; do not run it.

DRY_RUN=0

die() {
  # One line on stderr naming the problem and the fix; exit 2 (like nmt_jax.main).
  echo "error: $*" >&2
  exit 2
}

quote() {
  # The arguments as one shell-quoted string: plain words as they are, others in '...'.
  local out="" arg
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
      out+=" $arg"
    else
      out+=" '${arg//\'/\'\\\'\'}'"
    fi
  done
  echo "${out# }"
}

run() {
  # Runs the command, or with --dry-run prints it (quoted, copy-pasteable) instead.
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "$(quote "$@")"
  else
    "$@"
  fi
}

need_value() {
  # need_value FLAG VALUE: FLAG was given without a value.
  [[ -n "$2" && "$2" != --* ]] || die "$1 needs a value (e.g. $1=...)"
}

check_positive_int() {
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1=$2 must be a positive integer"
}

check_config() {
  # The config file (before any ':preset') must exist in this checkout.
  local path="${1%%:*}"
  [[ -n "$1" ]] || die "--config is required (e.g. --config=configs/memory_k64.py)"
  [[ -f "$REPO_ROOT/$path" || -f "$path" ]] || \
    die "config file $path does not exist (give a path like configs/memory_k64.py)"
}

from_here() {
  # A path given on the command line as the job names it: jobs run from the
  # repository root, so one relative to another directory becomes absolute.
  if [[ "$1" == /* || "$PWD" -ef "$REPO_ROOT" ]]; then
    echo "$1"
  else
    echo "$PWD/$1"
  fi
}

resolve_config() {
  # check_config, then the config as the job names it: a file found from here
  # (from_here), else the repository's. Use: CONFIG="$(resolve_config ...)" || exit 2
  check_config "$1"
  local path="${1%%:*}" preset=""
  [[ "$1" == *:* ]] && preset=":${1#*:}"
  if [[ -f "$path" ]]; then
    echo "$(from_here "$path")$preset"
  else
    echo "$1"
  fi
}
