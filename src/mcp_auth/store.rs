//! SQL of MCP authorization: clients, grants (token families), codes and tokens. Tenant first.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{ClientView, GrantView};
use crate::{error::Result, ids::TenantId, members::Role};

/// A live access token's grant, as the resource server checks it.
#[derive(Clone, Debug)]
pub struct AccessHit {
    pub grant_id: Uuid,
    pub client_ref: Uuid,
    pub resource: String,
    pub member_id: Uuid,
    pub role: Role,
    pub issuer: String,
    pub subject: String,
    /// When the token ends (database clock); a replica's cached answer is checked against it.
    pub expires_at: DateTime<Utc>,
}

/// The live access token with this digest: unexpired (database clock), grant and client
/// unrevoked, member still present.
pub async fn access(conn: &mut PgConnection, tenant: TenantId, digest: &[u8]) -> Result<Option<AccessHit>> {
    let row = sqlx::query!(
        "SELECT g.id, g.client_ref, g.resource, m.id AS member_id, m.role, m.issuer, m.subject, t.expires_at
           FROM mcp_tokens t
           JOIN mcp_grants g ON g.tenant_id = t.tenant_id AND g.id = t.grant_id
           JOIN mcp_clients c ON c.tenant_id = g.tenant_id AND c.id = g.client_ref
           JOIN members m ON m.tenant_id = g.tenant_id AND m.id = g.member_id
          WHERE t.tenant_id = $1 AND t.token_hash = $2 AND t.kind = 'access' AND t.expires_at > now()
            AND g.revoked_at IS NULL AND c.revoked_at IS NULL",
        tenant.0,
        digest,
    )
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(AccessHit {
        grant_id: row.id,
        client_ref: row.client_ref,
        resource: row.resource,
        member_id: row.member_id,
        role: Role::parse(&row.role)?,
        issuer: row.issuer,
        subject: row.subject,
        expires_at: row.expires_at,
    }))
}

/// A client row.
#[derive(Clone, Debug)]
pub struct Client {
    pub id: Uuid,
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub revoked: bool,
}

/// An `mcp_clients` row as [`client`] and [`insert_client`] return it.
struct ClientRow {
    id: Uuid,
    client_id: String,
    name: String,
    redirect_uris: Vec<String>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<ClientRow> for Client {
    fn from(row: ClientRow) -> Client {
        Client {
            id: row.id,
            client_id: row.client_id,
            name: row.name,
            redirect_uris: row.redirect_uris,
            revoked: row.revoked_at.is_some(),
        }
    }
}

pub async fn client(conn: &mut PgConnection, tenant: TenantId, client_id: &str) -> Result<Option<Client>> {
    let row = sqlx::query_as!(
        ClientRow,
        "SELECT id, client_id, name, redirect_uris, revoked_at FROM mcp_clients WHERE tenant_id = $1 AND client_id = $2",
        tenant.0,
        client_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Client::from))
}

pub async fn insert_client(
    conn: &mut PgConnection,
    tenant: TenantId,
    client_id: &str,
    kind: &str,
    name: &str,
    redirect_uris: &[String],
) -> Result<Client> {
    let row = sqlx::query_as!(
        ClientRow,
        "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris) VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING id, client_id, name, redirect_uris, revoked_at",
        tenant.0,
        Uuid::new_v4(),
        client_id,
        kind,
        name,
        redirect_uris,
    )
    .fetch_one(conn)
    .await?;
    Ok(row.into())
}

/// Records what a metadata document said at this authorization (never un-revokes).
pub async fn refresh_document_client(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    name: &str,
    redirect_uris: &[String],
) -> Result<()> {
    sqlx::query!(
        "UPDATE mcp_clients SET name = $3, redirect_uris = $4 WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
        name,
        redirect_uris,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A grant (token family) to create: who authorized which client for what, and its first
/// authorization code (stored as its digest) with the redirect URI and PKCE challenge it is
/// bound to.
pub struct NewGrant<'a> {
    pub client_ref: Uuid,
    pub member_id: Uuid,
    pub workspace_id: Uuid,
    pub resource: &'a str,
    pub pool: Option<&'a str>,
    pub code_hash: &'a [u8],
    pub redirect_uri: &'a str,
    pub code_challenge: &'a str,
}

/// A new grant (token family) and its authorization code; the grant's id.
pub async fn insert_grant(conn: &mut PgConnection, tenant: TenantId, grant: &NewGrant<'_>) -> Result<Uuid> {
    let NewGrant { client_ref, member_id, workspace_id, resource, pool, code_hash, redirect_uri, code_challenge } = *grant;
    let id = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO mcp_grants (tenant_id, id, client_ref, member_id, workspace_id, resource, pool, scope)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        tenant.0,
        id,
        client_ref,
        member_id,
        workspace_id,
        resource,
        pool,
        super::SCOPE,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO mcp_codes (tenant_id, code_hash, grant_id, redirect_uri, code_challenge, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))",
        tenant.0,
        code_hash,
        id,
        redirect_uri,
        code_challenge,
        super::CODE_TTL_SECS as f64,
    )
    .execute(conn)
    .await?;
    Ok(id)
}

/// What a consumed code carries.
pub struct Code {
    pub grant_id: Uuid,
    pub redirect_uri: String,
    pub code_challenge: String,
}

/// Consumes a code (compare-and-set: unused and unexpired). `Err(true)` when it exists but
/// was already used (a replay), `Err(false)` when unknown or expired.
pub async fn take_code(conn: &mut PgConnection, tenant: TenantId, hash: &[u8]) -> Result<Result<Code, Option<Uuid>>> {
    let row = sqlx::query_as!(
        Code,
        "UPDATE mcp_codes SET used_at = now()
          WHERE tenant_id = $1 AND code_hash = $2 AND used_at IS NULL AND expires_at > now()
         RETURNING grant_id, redirect_uri, code_challenge",
        tenant.0,
        hash,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(code) = row {
        return Ok(Ok(code));
    }
    let replayed = sqlx::query_scalar!(
        "SELECT grant_id FROM mcp_codes WHERE tenant_id = $1 AND code_hash = $2 AND used_at IS NOT NULL",
        tenant.0,
        hash,
    )
    .fetch_optional(conn)
    .await?;
    Ok(Err(replayed))
}

/// Spends a refresh token (compare-and-set). `Err(Some(grant))` when it was already spent.
pub async fn spend_refresh(conn: &mut PgConnection, tenant: TenantId, hash: &[u8]) -> Result<Result<Uuid, Option<Uuid>>> {
    let won = sqlx::query_scalar!(
        "UPDATE mcp_tokens SET spent_at = now()
          WHERE tenant_id = $1 AND token_hash = $2 AND kind = 'refresh' AND spent_at IS NULL AND expires_at > now()
         RETURNING grant_id",
        tenant.0,
        hash,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(grant) = won {
        return Ok(Ok(grant));
    }
    let spent = sqlx::query_scalar!(
        "SELECT grant_id FROM mcp_tokens WHERE tenant_id = $1 AND token_hash = $2 AND kind = 'refresh' AND spent_at IS NOT NULL",
        tenant.0,
        hash,
    )
    .fetch_optional(conn)
    .await?;
    Ok(Err(spent))
}

/// A grant with what the token endpoint checks.
pub struct Grant {
    pub id: Uuid,
    pub client_id: String,
    pub resource: String,
    pub usable: bool,
}

/// The grant, and whether it can still mint tokens (grant and client unrevoked, member present).
pub async fn grant(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Grant>> {
    Ok(sqlx::query_as!(
        Grant,
        r#"SELECT g.id, c.client_id, g.resource,
                (g.revoked_at IS NULL AND c.revoked_at IS NULL AND m.id IS NOT NULL) AS "usable!"
           FROM mcp_grants g
           JOIN mcp_clients c ON c.tenant_id = g.tenant_id AND c.id = g.client_ref
           LEFT JOIN members m ON m.tenant_id = g.tenant_id AND m.id = g.member_id
          WHERE g.tenant_id = $1 AND g.id = $2"#,
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// Stores a new access and refresh token of `grant`.
pub async fn insert_tokens(
    conn: &mut PgConnection,
    tenant: TenantId,
    grant: Uuid,
    access_hash: &[u8],
    access_ttl_secs: u64,
    refresh_hash: &[u8],
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO mcp_tokens (tenant_id, token_hash, grant_id, kind, expires_at) VALUES
           ($1, $2, $3, 'access', now() + make_interval(secs => $4)),
           ($1, $5, $3, 'refresh', now() + make_interval(secs => $6))",
        tenant.0,
        access_hash,
        grant,
        access_ttl_secs as f64,
        refresh_hash,
        super::REFRESH_TTL_SECS as f64,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Revokes a live grant (compare-and-set); false when it was already revoked or is absent
/// (or, with `member`, is another member's).
pub async fn revoke_grant(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    member: Option<Uuid>,
    by: &str,
    reason: &str,
) -> Result<bool> {
    let hit = sqlx::query!(
        "UPDATE mcp_grants SET revoked_at = now(), revoked_by = $4, revoked_reason = $5
          WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL AND ($3::uuid IS NULL OR member_id = $3)",
        tenant.0,
        id,
        member,
        by,
        reason,
    )
    .execute(conn)
    .await?;
    Ok(hit.rows_affected() == 1)
}

/// Revokes a live client (compare-and-set).
pub async fn revoke_client(conn: &mut PgConnection, tenant: TenantId, id: Uuid, by: &str) -> Result<bool> {
    let hit = sqlx::query!(
        "UPDATE mcp_clients SET revoked_at = now(), revoked_by = $3 WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL",
        tenant.0,
        id,
        by,
    )
    .execute(conn)
    .await?;
    Ok(hit.rows_affected() == 1)
}

/// Grants, newest first: one member's, or (`member` None) the tenant's.
pub async fn grants(conn: &mut PgConnection, tenant: TenantId, member: Option<Uuid>) -> Result<Vec<GrantView>> {
    let rows = sqlx::query!(
        "SELECT g.id, g.member_id, g.resource, g.pool, g.scope, g.created_at, g.revoked_at, g.revoked_reason,
                c.id AS c_id, c.client_id, c.kind, c.name, c.redirect_uris, c.created_at AS c_created, c.revoked_at AS c_revoked
           FROM mcp_grants g JOIN mcp_clients c ON c.tenant_id = g.tenant_id AND c.id = g.client_ref
          WHERE g.tenant_id = $1 AND ($2::uuid IS NULL OR g.member_id = $2)
          ORDER BY g.created_at DESC, g.id LIMIT 500",
        tenant.0,
        member,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| GrantView {
            id: r.id,
            client: ClientView {
                id: r.c_id,
                client_id: r.client_id,
                kind: r.kind,
                name: r.name,
                redirect_uris: r.redirect_uris,
                created_at: r.c_created,
                revoked_at: r.c_revoked,
            },
            member_id: r.member_id,
            resource: r.resource,
            pool: r.pool,
            scope: r.scope,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
            revoked_reason: r.revoked_reason,
        })
        .collect())
}

/// The tenant's clients, newest first.
pub async fn clients(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<ClientView>> {
    Ok(sqlx::query_as!(
        ClientView,
        "SELECT id, client_id, kind, name, redirect_uris, created_at, revoked_at FROM mcp_clients
          WHERE tenant_id = $1 ORDER BY created_at DESC, id LIMIT 500",
        tenant.0,
    )
    .fetch_all(conn)
    .await?)
}

/// Prune-on-write: up to 100 of the tenant's tokens and codes that expired more than a day ago
/// (each one index range; a spent refresh token stays for reuse detection until then).
pub async fn prune(conn: &mut PgConnection, tenant: TenantId) -> Result<()> {
    sqlx::query!(
        "WITH doomed AS MATERIALIZED (
            SELECT token_hash FROM mcp_tokens WHERE tenant_id = $1 AND expires_at < now() - interval '1 day'
             ORDER BY expires_at LIMIT 100)
         DELETE FROM mcp_tokens t USING doomed d WHERE t.tenant_id = $1 AND t.token_hash = d.token_hash",
        tenant.0,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "WITH doomed AS MATERIALIZED (
            SELECT code_hash FROM mcp_codes WHERE tenant_id = $1 AND expires_at < now() - interval '1 day'
             ORDER BY expires_at LIMIT 100)
         DELETE FROM mcp_codes c USING doomed d WHERE c.tenant_id = $1 AND c.code_hash = d.code_hash",
        tenant.0,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The grant a token (access or refresh, live or not) belongs to.
pub async fn grant_of_token(conn: &mut PgConnection, tenant: TenantId, hash: &[u8]) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar!("SELECT grant_id FROM mcp_tokens WHERE tenant_id = $1 AND token_hash = $2", tenant.0, hash)
        .fetch_optional(conn)
        .await?)
}

/// Prune-on-write of anonymous registrations: up to 100 of the tenant's registered clients
/// older than a day that no grant refers to. Then how many registrations of the last day are
/// still unused (the cap counts them).
pub async fn prune_registrations(conn: &mut PgConnection, tenant: TenantId) -> Result<i64> {
    sqlx::query!(
        "WITH doomed AS MATERIALIZED (
            SELECT c.id FROM mcp_clients c
             WHERE c.tenant_id = $1 AND c.kind = 'registered' AND c.created_at < now() - interval '1 day'
               AND NOT EXISTS (SELECT 1 FROM mcp_grants g WHERE g.tenant_id = c.tenant_id AND g.client_ref = c.id)
             ORDER BY c.created_at LIMIT 100)
         DELETE FROM mcp_clients c USING doomed d WHERE c.tenant_id = $1 AND c.id = d.id",
        tenant.0,
    )
    .execute(&mut *conn)
    .await?;
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM mcp_clients c
          WHERE c.tenant_id = $1 AND c.kind = 'registered' AND c.created_at >= now() - interval '1 day'
            AND NOT EXISTS (SELECT 1 FROM mcp_grants g WHERE g.tenant_id = c.tenant_id AND g.client_ref = c.id)"#,
        tenant.0,
    )
    .fetch_one(conn)
    .await?)
}
