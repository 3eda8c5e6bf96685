//! `GET /metrics`: process-wide counters in the Prometheus text format. Nothing here names a
//! tenant, a workspace or a credential, so the endpoint needs no authentication; keep it that
//! way (aggregate numbers only).

use std::{fmt::Write, sync::atomic::Ordering};

use axum::{Router, extract::State, http::header, response::IntoResponse, routing::get};

use crate::AppState;

fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut out = String::with_capacity(2048);
    let counts = state.activity.counts();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    metric(
        &mut out,
        "gatehouse_info",
        "gauge",
        "The running version.",
        &[(concat!("{version=\"", env!("CARGO_PKG_VERSION"), "\"}"), 1)],
    );
    metric(
        &mut out,
        "gatehouse_activity_rows_total",
        "counter",
        "Activity rows by fate: written, dropped (queue full; the call was not delayed), lost (three failed writes).",
        &[
            ("{fate=\"written\"}", load(&counts.written)),
            ("{fate=\"dropped\"}", load(&counts.dropped)),
            ("{fate=\"lost\"}", load(&counts.lost)),
        ],
    );
    metric(
        &mut out,
        "gatehouse_activity_queue_rows",
        "gauge",
        "Activity rows waiting to be written.",
        &[("", state.activity.queued() as u64)],
    );
    let replica = state.db.replica();
    metric(
        &mut out,
        "gatehouse_replica_trusted",
        "gauge",
        "1 while this replica holds a live lease and listens, so the hot path uses applied epochs; 0 while it reads them per request.",
        &[("", u64::from(replica.trusted()))],
    );
    metric(
        &mut out,
        "gatehouse_replica_events_total",
        "counter",
        "Replica registry events: registrations, trust losses, epoch changes applied from notifications.",
        &[
            ("{event=\"registered\"}", load(&replica.registrations)),
            ("{event=\"distrusted\"}", load(&replica.distrusts)),
            ("{event=\"applied\"}", load(&replica.notifications)),
        ],
    );
    let ops = state.ops.counts();
    metric(
        &mut out,
        "gatehouse_ops_failures_total",
        "counter",
        "Ops failures recorded, by fate: written, dropped (queue full; the caller was not delayed), lost (three failed writes).",
        &[
            ("{fate=\"written\"}", load(&ops.written)),
            ("{fate=\"dropped\"}", load(&ops.dropped)),
            ("{fate=\"lost\"}", load(&ops.lost)),
        ],
    );
    metric(
        &mut out,
        "gatehouse_epoch_cache_requests_total",
        "counter",
        "Requests answered from a replica cache validated by the tenant epoch (hit) or derived again (miss).",
        &[
            ("{cache=\"machines\",result=\"hit\"}", load(&state.machines.hits)),
            ("{cache=\"machines\",result=\"miss\"}", load(&state.machines.misses)),
            ("{cache=\"mcp_tokens\",result=\"hit\"}", load(&state.mcp_tokens.hits)),
            ("{cache=\"mcp_tokens\",result=\"miss\"}", load(&state.mcp_tokens.misses)),
            ("{cache=\"bound\",result=\"hit\"}", load(&state.bound.hits)),
            ("{cache=\"bound\",result=\"miss\"}", load(&state.bound.misses)),
            ("{cache=\"credentials\",result=\"hit\"}", load(&state.credentials.hits)),
            ("{cache=\"credentials\",result=\"miss\"}", load(&state.credentials.misses)),
            ("{cache=\"peers\",result=\"hit\"}", load(&state.peers.hits)),
            ("{cache=\"peers\",result=\"miss\"}", load(&state.peers.misses)),
        ],
    );
    let quotas = &state.quotas.counts;
    metric(
        &mut out,
        "gatehouse_quota_events_total",
        "counter",
        "Quota ledger events on this replica: leases made and failed (database unreachable or slower than two seconds), calls refused, calls admitted uncounted by a fail-open limit.",
        &[
            ("{event=\"lease\"}", load(&quotas.leases)),
            ("{event=\"lease_failed\"}", load(&quotas.lease_failures)),
            ("{event=\"refused\"}", load(&quotas.refused)),
            ("{event=\"admitted_open\"}", load(&quotas.admitted_open)),
        ],
    );
    let epochs = state.db.epoch_batch();
    metric(
        &mut out,
        "gatehouse_epoch_reads_total",
        "counter",
        "Tenant epoch reads asked for by requests, and the statements that answered them (concurrent requests share a read that started after they arrived).",
        &[("{kind=\"request\"}", load(&epochs.requests)), ("{kind=\"statement\"}", load(&epochs.statements))],
    );
    metric(
        &mut out,
        "gatehouse_mcp_posts_total",
        "counter",
        "POSTs to MCP endpoints by the path that answered: direct (a plain tools/call) or rmcp (everything else).",
        &[("{path=\"direct\"}", load(&crate::gateway::direct::DIRECT)), ("{path=\"rmcp\"}", load(&crate::gateway::direct::RMCP))],
    );
    metric(
        &mut out,
        "gatehouse_downstream_sessions",
        "gauge",
        "Open client sessions to downstream MCP servers on this replica.",
        &[("", state.downstreams.session_count().await as u64)],
    );
    let pool = state.db.pool();
    metric(
        &mut out,
        "gatehouse_db_connections",
        "gauge",
        "Database pool connections by state.",
        &[("{state=\"idle\"}", pool.num_idle() as u64), ("{state=\"open\"}", u64::from(pool.size()))],
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], out)
}

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}
