//! Downstream OAuth SQL: flows and grants, tenant first. Claims and leases are one conditional
//! statement each.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

mod revocations;

pub use revocations::{Intent, Stale, claim_stale, insert_intent, prune_settled, settle_intent};

use super::issuer::IssCheck;
use crate::{
    db::required,
    error::Result,
    ids::TenantId,
    vault::{Owner, slots::Slot},
};

pub const FLOW_TTL_SECS: i64 = 900;
/// How long a replica may hold a grant's refresh lease.
pub const LEASE_SECS: i64 = 30;
/// An access token this close to expiry is refreshed first.
pub const EXPIRY_MARGIN_SECS: i64 = 30;

/// Which client a flow or grant uses at the token endpoint, and the resource it asks for.
#[derive(Clone, Copy, Debug)]
pub struct FlowClient<'a> {
    pub client_id: &'a str,
    pub token_endpoint: &'a str,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    pub client_auth: &'a str,
    /// The RFC 8707 resource indicator.
    pub resource: Option<&'a str>,
    /// The scopes the authorization request asked for (None: `scope` omitted).
    pub scopes: Option<&'a [String]>,
}

/// A pending flow, as the callback claims it.
pub struct Flow {
    pub workspace: Uuid,
    pub connector: String,
    pub owner: String,
    pub started_by: Option<Uuid>,
    pub link_id: Option<Uuid>,
    pub verifier: String,
    pub client_id: String,
    pub token_endpoint: String,
    pub client_auth: String,
    pub resource: Option<String>,
    /// What the callback's `iss` must be (RFC 9207).
    pub iss: IssCheck,
    pub scopes: Option<Vec<String>>,
}

/// What a new flow records beside its slot, until the callback claims it.
#[derive(Clone, Copy, Debug)]
pub struct NewFlow<'a> {
    /// The digest of the `state` parameter the callback brings back.
    pub state_hash: &'a [u8],
    /// The member who started it (None: a connect link did).
    pub started_by: Option<Uuid>,
    pub link_id: Option<Uuid>,
    /// The PKCE verifier, sealed.
    pub verifier: &'a str,
    pub client: FlowClient<'a>,
    pub iss: &'a IssCheck,
}

/// Records a pending flow for the slot (the slot carries the tenant), first dropping the
/// tenant's flows expired over an hour ago.
pub async fn insert_flow(conn: &mut PgConnection, slot: &Slot<'_>, flow: NewFlow<'_>) -> Result<()> {
    let Slot { tenant, workspace, connector, owner } = *slot;
    let NewFlow { state_hash, started_by, link_id, verifier, client, iss } = flow;
    sqlx::query!("DELETE FROM oauth_flows WHERE tenant_id = $1 AND expires_at <= now() - interval '1 hour'", tenant.0)
        .execute(&mut *conn)
        .await?;
    sqlx::query!(
        "INSERT INTO oauth_flows (tenant_id, state_hash, workspace_id, connector_id, owner, started_by, link_id, verifier,
                                  token_endpoint, expires_at, client_id, client_auth, resource, issuer, iss_required, scopes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + make_interval(secs => $10::float8), $11, $12, $13, $14, $15, $16)",
        tenant.0,
        state_hash,
        workspace,
        connector,
        owner.as_text(),
        started_by,
        link_id,
        verifier,
        client.token_endpoint,
        FLOW_TTL_SECS as f64,
        client.client_id,
        client.client_auth,
        client.resource,
        iss.issuer.as_deref(),
        iss.required,
        client.scopes,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Claims an unclaimed, unexpired flow: of several duplicate callbacks exactly one gets it. A
/// flow a member started is claimed only by that member's callback (`member`), so a callback
/// replayed from another browser consumes nothing.
pub async fn claim_flow(
    conn: &mut PgConnection,
    tenant: TenantId,
    state_hash: &[u8],
    member: Option<Uuid>,
) -> Result<Option<Flow>> {
    let row = sqlx::query!(
        "UPDATE oauth_flows SET claimed_at = now()
          WHERE tenant_id = $1 AND state_hash = $2 AND claimed_at IS NULL AND expires_at > now()
            AND (started_by IS NULL OR started_by = $3)
          RETURNING workspace_id, connector_id, owner, started_by, link_id, verifier, client_id, token_endpoint, client_auth, resource,
                    issuer, iss_required, scopes",
        tenant.0,
        state_hash,
        member,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Flow {
        workspace: r.workspace_id,
        connector: r.connector_id,
        owner: r.owner,
        started_by: r.started_by,
        link_id: r.link_id,
        verifier: r.verifier,
        client_id: r.client_id,
        token_endpoint: r.token_endpoint,
        client_auth: r.client_auth,
        resource: r.resource,
        iss: IssCheck { issuer: r.issuer, required: r.iss_required },
        scopes: r.scopes,
    }))
}

/// A grant's state and its sealed tokens, with the epoch that labels them.
#[derive(Clone)]
pub struct Grant {
    pub status: String,
    pub access_expires_at: Option<DateTime<Utc>>,
    pub client_id: String,
    pub token_endpoint: String,
    pub client_auth: String,
    pub resource: Option<String>,
    /// The scopes its authorization asked for.
    pub scopes: Option<Vec<String>>,
    pub account_label: Option<String>,
    pub connected_at: DateTime<Utc>,
    pub refreshed_at: Option<DateTime<Utc>>,
    /// The sealed tokens (absent once the grant died).
    pub envelope: Option<String>,
    pub version: Option<i64>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant").field("status", &self.status).field("version", &self.version).finish_non_exhaustive()
    }
}

pub async fn grant(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
) -> Result<(Option<Grant>, i64)> {
    // Both joins are outer, so every column is read as nullable ("?"); the grant's NOT NULL
    // columns are then required once its row is there.
    let row = sqlx::query!(
        r#"SELECT (SELECT epoch FROM tenants WHERE id = $1) AS "epoch?", g.status AS "status?",
                g.access_expires_at AS "access_expires_at?", g.client_id AS "client_id?", g.token_endpoint AS "token_endpoint?",
                g.client_auth AS "client_auth?", g.resource AS "resource?", g.scopes AS "scopes?", g.account_label AS "account_label?",
                g.connected_at AS "connected_at?", g.refreshed_at AS "refreshed_at?", c.envelope AS "envelope?",
                c.version AS "version?", c.updated_at AS "updated_at?"
           FROM (SELECT 1) one
           LEFT JOIN oauth_grants g ON g.tenant_id = $1 AND g.workspace_id = $2 AND g.connector_id = $3 AND g.owner = $4
           LEFT JOIN credentials c ON c.tenant_id = $1 AND c.workspace_id = $2 AND c.connector_id = $3 AND c.owner = $4"#,
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
    )
    .fetch_one(conn)
    .await?;
    let grant = match row.status {
        None => None,
        Some(status) => Some(Grant {
            status,
            access_expires_at: row.access_expires_at,
            client_id: required(row.client_id, "client_id")?,
            token_endpoint: required(row.token_endpoint, "token_endpoint")?,
            client_auth: required(row.client_auth, "client_auth")?,
            resource: row.resource,
            scopes: row.scopes,
            account_label: row.account_label,
            connected_at: required(row.connected_at, "connected_at")?,
            refreshed_at: row.refreshed_at,
            envelope: row.envelope,
            version: row.version,
            updated_at: row.updated_at,
        }),
    };
    Ok((grant, row.epoch.unwrap_or(0)))
}

/// Creates or replaces a grant after a successful authorization (lease and spent mark cleared).
/// The slot carries the tenant.
pub async fn upsert_grant(
    conn: &mut PgConnection,
    slot: &Slot<'_>,
    expires_in_secs: Option<i64>,
    client: FlowClient<'_>,
    account_label: Option<&str>,
    by: &str,
) -> Result<()> {
    let Slot { tenant, workspace, connector, owner } = *slot;
    sqlx::query!(
        "INSERT INTO oauth_grants AS g (tenant_id, workspace_id, connector_id, owner, member_id, access_expires_at,
                                       token_endpoint, account_label, connected_by, client_id, client_auth, resource, scopes)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::float8), $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (tenant_id, workspace_id, connector_id, owner) DO UPDATE
            SET status = 'active', access_expires_at = EXCLUDED.access_expires_at, token_endpoint = EXCLUDED.token_endpoint,
                client_id = EXCLUDED.client_id, client_auth = EXCLUDED.client_auth, resource = EXCLUDED.resource,
                scopes = EXCLUDED.scopes, step_up_scopes = NULL,
                account_label = EXCLUDED.account_label, connected_by = EXCLUDED.connected_by, connected_at = now(),
                lease_holder = NULL, lease_until = NULL, spent_refresh = NULL, refreshed_at = NULL",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
        owner.member_id(),
        expires_in_secs.map(|s| s as f64),
        client.token_endpoint,
        account_label,
        by,
        client.client_id,
        client.client_auth,
        client.resource,
        client.scopes,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the scopes a grant's next authorization asks for (a step-up).
pub async fn step_up(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
    scopes: &[String],
) -> Result<()> {
    sqlx::query!(
        "UPDATE oauth_grants SET step_up_scopes = $5
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
        scopes,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The scopes a step-up asks the grant's next authorization for, if one is recorded.
pub async fn step_up_scopes(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
) -> Result<Option<Vec<String>>> {
    let scopes = sqlx::query_scalar!(
        "SELECT step_up_scopes FROM oauth_grants
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(scopes.flatten())
}

/// Takes the refresh lease and records `refresh_digest` as spent, in one statement: only an
/// active grant whose access token is (by the database clock) about to expire, with no live
/// lease, and whose refresh token was not already sent.
pub async fn take_lease(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
    holder: Uuid,
    refresh_digest: &[u8],
) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE oauth_grants SET lease_holder = $5, lease_until = now() + make_interval(secs => $7::float8), spent_refresh = $6
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 AND status = 'active'
            AND (lease_until IS NULL OR lease_until <= now())
            AND spent_refresh IS DISTINCT FROM $6
            AND (access_expires_at IS NULL OR access_expires_at <= now() + make_interval(secs => $8::float8))",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
        holder,
        refresh_digest,
        LEASE_SECS as f64,
        EXPIRY_MARGIN_SECS as f64,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Records a refresh's new expiry and releases the lease (only by its holder). `keep_spent`
/// false clears the spent mark: the provider kept the same refresh token alive. The slot
/// carries the tenant.
pub async fn refreshed(
    conn: &mut PgConnection,
    slot: &Slot<'_>,
    holder: Uuid,
    expires_in_secs: Option<i64>,
    keep_spent: bool,
) -> Result<bool> {
    let Slot { tenant, workspace, connector, owner } = *slot;
    let done = sqlx::query!(
        "UPDATE oauth_grants SET access_expires_at = now() + make_interval(secs => $6::float8), lease_holder = NULL,
                lease_until = NULL, refreshed_at = now(), spent_refresh = CASE WHEN $7 THEN spent_refresh END
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 AND lease_holder = $5 AND status = 'active'",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
        holder,
        expires_in_secs.map(|s| s as f64),
        keep_spent,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Marks a grant dead (`auth_required`) and deletes its tokens.
pub async fn kill(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, connector: &str, owner: Owner) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE oauth_grants SET status = 'auth_required', lease_holder = NULL, lease_until = NULL
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 AND status = 'active'",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
    )
    .execute(&mut *conn)
    .await?;
    then_tokens(conn, done.rows_affected(), tenant, workspace, connector, owner).await
}

/// Deletes a grant and its tokens; whether there was one.
pub async fn delete(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, connector: &str, owner: Owner) -> Result<bool> {
    let done = sqlx::query!(
        "DELETE FROM oauth_grants WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
    )
    .execute(&mut *conn)
    .await?;
    then_tokens(conn, done.rows_affected(), tenant, workspace, connector, owner).await
}

/// After a statement on one grant (`affected` rows): deletes the grant's tokens from the
/// vault; whether the statement touched the grant.
async fn then_tokens(
    conn: &mut PgConnection,
    affected: u64,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
) -> Result<bool> {
    crate::vault::slots::tx::delete(conn, tenant, workspace, connector, owner).await?;
    Ok(affected == 1)
}

/// The client registered for this connector at `issuer`, if any: its id and how it
/// authenticates at the token endpoint.
pub async fn registered_client(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    issuer: &str,
) -> Result<Option<(String, String)>> {
    let row = sqlx::query!(
        "SELECT client_id, client_auth FROM oauth_clients
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND issuer = $4",
        tenant.0,
        workspace,
        connector,
        issuer,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.client_id, r.client_auth)))
}

/// Keeps a registration unless another replica's came first: the one kept, and whether it is
/// this one.
pub async fn keep_client(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    issuer: &str,
    client_id: &str,
    client_auth: &str,
) -> Result<((String, String), bool)> {
    let kept = sqlx::query_scalar!(
        "INSERT INTO oauth_clients (tenant_id, workspace_id, connector_id, issuer, client_id, client_auth)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT DO NOTHING RETURNING client_id",
        tenant.0,
        workspace,
        connector,
        issuer,
        client_id,
        client_auth,
    )
    .fetch_optional(&mut *conn)
    .await?;
    match kept {
        Some(id) => Ok(((id, client_auth.to_owned()), true)),
        None => {
            let other = registered_client(conn, tenant, workspace, connector, issuer).await?;
            Ok((other.unwrap_or_else(|| (client_id.to_owned(), client_auth.to_owned())), false))
        }
    }
}
