# syntax=docker/dockerfile:1
#
# deep-research: multi-stage build; the runtime image holds only the binary
# (migrations are compiled into it).
#   docker build -t deep-research .
#   docker run -p 2024:2024 deep-research            # SQLite inside the container
#   docker compose up                                 # with Postgres

# ---- build ------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /build

# Dependencies first, in their own layer: rebuilt only when a manifest or the
# lock file change. Dummy crate roots (the service and its crates/) let cargo
# compile every dependency.
COPY Cargo.toml Cargo.lock ./
COPY crates/base/Cargo.toml crates/base/
COPY crates/models/Cargo.toml crates/models/
COPY crates/engine/Cargo.toml crates/engine/
RUN mkdir -p src benches crates/base/src crates/models/src crates/engine/src \
    && echo 'fn main() {}' > src/main.rs \
    && for b in load kills corpus; do echo 'fn main() {}' > benches/$b.rs; done \
    && touch src/lib.rs crates/base/src/lib.rs crates/models/src/lib.rs crates/engine/src/lib.rs \
    && cargo build --release --locked --bin deep-research \
    && rm -rf src benches crates/base/src crates/models/src crates/engine/src

# The real sources (see .dockerignore). Touch the crate roots so cargo does not
# mistake the dummy build for an up-to-date one.
COPY . .
RUN touch src/main.rs src/lib.rs crates/base/src/lib.rs crates/models/src/lib.rs crates/engine/src/lib.rs \
    && cargo build --release --locked --bin deep-research \
    && install -m 0755 target/release/deep-research /usr/local/bin/deep-research

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --shell /usr/sbin/nologin app \
    && install -d -o app -g app /app

WORKDIR /app
COPY --from=builder /usr/local/bin/deep-research /usr/local/bin/deep-research

USER app
ENV HOST=0.0.0.0 \
    PORT=2024
EXPOSE 2024
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["deep-research", "healthcheck"]
CMD ["deep-research", "serve"]
