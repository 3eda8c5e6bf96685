# syntax=docker/dockerfile:1
#
# Gatehouse container image: one static-ish binary on a slim Debian base.
#
#   docker build -t gatehouse:dev .
#   docker run --rm -e DATABASE_URL=postgres://... -p 8080:8080 gatehouse:dev
#
# The image ships no PostgreSQL, so `serve` needs DATABASE_URL (the private
# database that `serve` starts without it is for a developer's machine only).

ARG RUST_VERSION=1.95

# ---------------------------------------------------------------------------
# Builder: compiles the `gatehouse` binary in release mode from the committed
# Cargo.lock. SQL is checked against the committed `.sqlx/` offline data, so
# no database is needed at build time.
FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    SQLX_OFFLINE=true
COPY . .
# The cache mounts keep downloaded crates and compiled dependencies between
# builds; the binary is copied out of the cached target dir before the step ends.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin gatehouse \
 && install -D -m 0755 target/release/gatehouse /out/gatehouse

# ---------------------------------------------------------------------------
# Runtime: CA certificates (for OIDC discovery, downstream MCP servers and the
# OTLP exporter over TLS) and nothing else.
FROM debian:bookworm-slim AS runtime
# Unpinned on purpose: the security updates of the bookworm suite are wanted.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 gatehouse \
 && useradd --system --uid 10001 --gid 10001 --no-log-init \
      --home-dir /var/lib/gatehouse --create-home --shell /usr/sbin/nologin gatehouse

COPY --from=builder /out/gatehouse /usr/local/bin/gatehouse

ENV GATEHOUSE_LISTEN=0.0.0.0:8080
WORKDIR /var/lib/gatehouse
USER 10001:10001
EXPOSE 8080
# `serve` drains in-flight requests on SIGTERM (what Kubernetes and compose send).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/gatehouse"]
CMD ["serve"]
