//! The shared catalog cache in PostgreSQL: one row per (workspace, connector), holding the
//! tools the connector's server listed, the configuration key they were fetched with, and
//! when. Which rows are fresh travels with the request's one configuration query (see
//! `workspaces::tx::bound`), so a replica only reads a row it does not already hold.

use chrono::{DateTime, Utc};
use rmcp::model::Tool;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
};

/// Which catalog: a workspace's connector, under one configuration.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub tenant: TenantId,
    pub workspace: Uuid,
    pub connector_id: &'a str,
    /// The digest of the connector's configuration.
    pub config_key: &'a str,
    /// What a changed or new tool definition does before approval (see [`super::pins`]).
    pub pinning: crate::workspaces::config::Pinning,
}

/// A connector's catalog: its tools, and what its server said of the list.
#[derive(Debug, Default)]
pub struct Catalog {
    pub tools: Vec<Tool>,
    /// When the shared cache stored it (`None`: an HTTP API's, which is its configuration,
    /// or a peer's, resolved at each call).
    pub fetched_at: Option<DateTime<Utc>>,
    pub listing: Listing,
}

/// What a server said of its tool list besides the tools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The revision it was listed in (`None`: not an MCP server, or listed before revisions
    /// were recorded).
    pub revision: Option<String>,
    /// How long the server said the list stays fresh (its 2026-07-28 `ttlMs`, the least of
    /// its pages'); `None`: it said nothing (a handshake-era list).
    pub ttl_ms: Option<u64>,
    /// Whether the server said its list may be shared only within the authorization that
    /// asked (its `cacheScope: "private"`, on any page).
    pub private: bool,
}

impl Catalog {
    /// How long from `now` an agent may still treat this list as fresh (2026-07-28 `ttlMs`):
    /// what the server allowed, counted from when it was listed, and never beyond the
    /// gateway's own refresh ([`crate::workspaces::CATALOG_TTL`]). A list the server gave no
    /// hint for is stale at once.
    pub fn fresh_for(&self, now: DateTime<Utc>) -> u64 {
        let allowed = self.listing.ttl_ms.unwrap_or(0).min(crate::workspaces::CATALOG_TTL.as_millis() as u64);
        let age = self.fetched_at.map_or(0, |at| now.signed_duration_since(at).num_milliseconds().max(0) as u64);
        allowed.saturating_sub(age)
    }
}

async fn load_row(conn: &mut PgConnection, t: Target<'_>) -> Result<Option<Catalog>> {
    let row = sqlx::query!(
        "SELECT fetched_at, tools, revision, ttl_ms, cache_scope FROM connector_catalogs
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND config_key = $4",
        t.tenant.0,
        t.workspace,
        t.connector_id,
        t.config_key,
    )
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let tools = serde_json::from_value(row.tools).map_err(|e| anyhow::anyhow!("stored catalog unreadable: {e}"))?;
    let listing = Listing {
        revision: row.revision,
        ttl_ms: row.ttl_ms.and_then(|ms| u64::try_from(ms).ok()),
        private: row.cache_scope.as_deref() == Some("private"),
    };
    Ok(Some(Catalog { tools, fetched_at: Some(row.fetched_at), listing }))
}

/// The stored catalog of `t`, if the shared cache holds one for this configuration.
pub async fn load(db: &Db, t: Target<'_>) -> Result<Option<Catalog>> {
    db.single_decision(Scope::Tenant(t.tenant), move |conn, _| Box::pin(load_row(conn, t))).await
}

/// Upserts the catalog; also answers, for drift, the previous tool count when the same
/// configuration now lists different tools (the downstream changed under us). A catalog's
/// tools are compared in name order, so a server listing the same tools in another order is
/// not a change.
async fn store_row(
    conn: &mut PgConnection,
    t: Target<'_>,
    tools: &serde_json::Value,
    listing: &Listing,
) -> Result<(DateTime<Utc>, Option<i64>)> {
    let row = sqlx::query!(
        r#"WITH old AS (SELECT config_key, tools FROM connector_catalogs
                         WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3)
           INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools, revision, ttl_ms, cache_scope)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (tenant_id, workspace_id, connector_id)
           DO UPDATE SET config_key = EXCLUDED.config_key, tools = EXCLUDED.tools, fetched_at = clock_timestamp(),
                         revision = EXCLUDED.revision, ttl_ms = EXCLUDED.ttl_ms, cache_scope = EXCLUDED.cache_scope
           RETURNING fetched_at,
               (SELECT jsonb_array_length(old.tools)::bigint FROM old
                 WHERE old.config_key = $4
                   AND (SELECT coalesce(jsonb_agg(x ORDER BY x->>'name', x::text), '[]') FROM jsonb_array_elements(old.tools) x)
                       IS DISTINCT FROM
                       (SELECT coalesce(jsonb_agg(x ORDER BY x->>'name', x::text), '[]') FROM jsonb_array_elements($5) x))
               AS "drifted_from?""#,
        t.tenant.0,
        t.workspace,
        t.connector_id,
        t.config_key,
        tools,
        listing.revision.as_deref(),
        listing.ttl_ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
        // A hinted list says public or private; a list without hints says nothing.
        listing.ttl_ms.map(|_| if listing.private { "private" } else { "public" }),
    )
    .fetch_one(conn)
    .await?;
    Ok((row.fetched_at, row.drifted_from))
}

/// The tenant's `drift` finding for a connector whose catalog changed under an unchanged
/// configuration (subject: workspace id/connector id).
fn drift(t: Target<'_>, was: i64, now: usize, at: DateTime<Utc>) -> crate::findings::Observation {
    crate::findings::Observation {
        tenant: t.tenant.0,
        kind: "drift",
        subject: format!("{}/{}", t.workspace, t.connector_id),
        operation: "catalog.refresh".into(),
        code: "tools_changed".into(),
        count: 1,
        first: at,
        last: at,
        message: format!("connector {} now lists {now} tools (was {was}) under the same configuration", t.connector_id),
    }
}

/// Stores a freshly fetched catalog as the pins allow it to be served (see [`super::pins`]),
/// and answers what is served. Two replicas fetching at once store equivalent answers (the
/// decision is serializable). With `audit`, an operator asked for it: the admin log says so.
pub async fn store(db: &Db, t: Target<'_>, tools: &[Tool], listing: &Listing, audit: Option<&Audit>) -> Result<Catalog> {
    let listed = super::pins::as_json(tools)?;
    let listed = &listed;
    db.serializable(Scope::Tenant(t.tenant), move |conn, _| {
        Box::pin(async move {
            let now = sqlx::query_scalar!(r#"SELECT clock_timestamp() AS "now!""#).fetch_one(&mut *conn).await?;
            let applied = super::pins::apply(&mut *conn, t, listed, now).await?;
            let served = serde_json::Value::Array(applied.served);
            let (fetched_at, drifted_from) = store_row(&mut *conn, t, &served, listing).await?;
            let mut findings = applied.findings;
            if let Some(was) = drifted_from {
                let now = served.as_array().map_or(0, Vec::len);
                findings.push(drift(t, was, now, fetched_at));
            }
            if !findings.is_empty() {
                crate::findings::observe(&mut *conn, &findings).await?;
            }
            if let Some(audit) = audit {
                let entry = Entry {
                    tenant: Some(t.tenant),
                    audit,
                    action: "connector.catalog_refresh",
                    target: format!("connector:{}", t.connector_id),
                    before: None,
                    after: Some(json!({
                        "workspace_id": t.workspace,
                        "tools": listed.len(),
                        "fetched_at": fetched_at,
                        "revision": listing.revision,
                    })),
                };
                admin_log::record(&mut *conn, entry).await?;
            }
            let served: Vec<Tool> =
                serde_json::from_value(served).map_err(|e| anyhow::anyhow!("a served definition is no tool: {e}"))?;
            Ok(Catalog { tools: served, fetched_at: Some(fetched_at), listing: listing.clone() })
        })
    })
    .await
}

/// Drops the workspace's stored catalog of `connector` (in the caller's transaction): the
/// tenant's epoch moves, every replica reads its configuration again, and the next call
/// fetches the catalog afresh.
pub(crate) async fn forget(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, connector: &str) -> Result<()> {
    sqlx::query!(
        "DELETE FROM connector_catalogs WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3",
        tenant.0,
        workspace,
        connector
    )
    .execute(conn)
    .await?;
    Ok(())
}
