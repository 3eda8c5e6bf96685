//! Connect-link and outbox SQL, tenant first in every function. Every transition is one
//! conditional statement; zero rows is the caller's typed refusal.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{error::Result, ids::TenantId};

/// A link as the API and CLI show it (never its secret).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Link {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub connector: String,
    pub email: String,
    pub status: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Whether the database clock has passed `expires_at` (an expired link is never consumed).
    pub expired: bool,
    pub used_at: Option<DateTime<Utc>>,
    pub account_label: Option<String>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
}

/// Runs `query_as!` into a [`Link`] with the one column list of a link, pasted (the query
/// macros accept literals joined by `+`, never a `const`): `SELECT <columns> <rest>`, or
/// `<statement> RETURNING <columns>`.
macro_rules! link {
    (SELECT $rest:literal, $($arg:expr),+ $(,)?) => {
        link!(@ ["SELECT "] $rest, $($arg),+)
    };
    (RETURNING $statement:literal, $($arg:expr),+ $(,)?) => {
        link!(@ [$statement, " RETURNING "] "", $($arg),+)
    };
    (@ [$($before:literal),+] $after:literal, $($arg:expr),+) => {
        sqlx::query_as!(
            Link,
            $($before +)+ r#"id, workspace_id, connector_id AS connector, email, status, created_by, created_at, expires_at,
                  expires_at <= now() AS "expired!", used_at, account_label, revoked_at, revoked_by"# + $after,
            $($arg),+
        )
    };
}

/// A link's row before it is inserted: only its secret's SHA-256 is kept.
pub struct NewLink<'a> {
    pub id: Uuid,
    pub workspace: Uuid,
    pub connector: &'a str,
    pub email: &'a str,
    pub token_hash: &'a [u8],
    pub ttl_secs: i64,
}

/// Inserts an outstanding link that expires `ttl_secs` from now (database clock).
pub async fn insert(conn: &mut PgConnection, tenant: TenantId, link: &NewLink<'_>, created_by: &str) -> Result<Link> {
    let NewLink { id, workspace, connector, email, token_hash, ttl_secs } = *link;
    let row = link!(
        RETURNING r#"INSERT INTO connect_links (tenant_id, id, workspace_id, connector_id, email, token_hash, created_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8::float8))"#,
        tenant.0,
        id,
        workspace,
        connector,
        email,
        token_hash,
        created_by,
        ttl_secs as f64,
    )
    .fetch_one(conn)
    .await?;
    Ok(row)
}

/// Newest first; `history` includes used, revoked and expired links.
pub async fn list(conn: &mut PgConnection, tenant: TenantId, history: bool, limit: i64) -> Result<Vec<Link>> {
    Ok(link!(
        SELECT " FROM connect_links
          WHERE tenant_id = $1 AND ($2 OR (status = 'outstanding' AND expires_at > now()))
          ORDER BY created_at DESC, id DESC LIMIT $3",
        tenant.0,
        history,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Link>> {
    Ok(link!(
        SELECT "
           FROM connect_links WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn by_token(conn: &mut PgConnection, tenant: TenantId, token_hash: &[u8]) -> Result<Option<Link>> {
    Ok(link!(
        SELECT "
           FROM connect_links WHERE tenant_id = $1 AND token_hash = $2",
        tenant.0,
        token_hash,
    )
    .fetch_optional(conn)
    .await?)
}

/// outstanding → revoked.
pub async fn revoke(conn: &mut PgConnection, tenant: TenantId, id: Uuid, by: &str) -> Result<Option<Link>> {
    Ok(link!(
        RETURNING r#"UPDATE connect_links SET status = 'revoked', revoked_at = now(), revoked_by = $3
          WHERE tenant_id = $1 AND id = $2 AND status = 'outstanding'"#,
        tenant.0,
        id,
        by,
    )
    .fetch_optional(conn)
    .await?)
}

/// outstanding and unexpired → used: of racing consumers exactly one gets the row.
pub async fn consume(conn: &mut PgConnection, tenant: TenantId, id: Uuid, label: &str) -> Result<Option<Link>> {
    Ok(link!(
        RETURNING r#"UPDATE connect_links SET status = 'used', used_at = now(), account_label = $3
          WHERE tenant_id = $1 AND id = $2 AND status = 'outstanding' AND expires_at > now()"#,
        tenant.0,
        id,
        label,
    )
    .fetch_optional(conn)
    .await?)
}

/// used → outstanding (never revoked → anything).
pub async fn restore(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Link>> {
    Ok(link!(
        RETURNING r#"UPDATE connect_links SET status = 'outstanding', used_at = NULL, account_label = NULL
          WHERE tenant_id = $1 AND id = $2 AND status = 'used'"#,
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// One mail waiting in (or delivered from) the outbox.
#[derive(Clone, Debug, Serialize)]
pub struct Mail {
    pub id: Uuid,
    pub to: String,
    pub subject: String,
    pub body: String,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
}

/// Queues a mail whose `body` is already sealed (see `connect_links::mint`).
pub async fn enqueue(conn: &mut PgConnection, tenant: TenantId, id: Uuid, to: &str, subject: &str, body: &str) -> Result<()> {
    sqlx::query!(
        "INSERT INTO mail_outbox (tenant_id, id, to_address, subject, body) VALUES ($1, $2, $3, $4, $5)",
        tenant.0,
        id,
        to,
        subject,
        body,
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn mark_sent(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE mail_outbox SET sent_at = now() WHERE tenant_id = $1 AND id = $2 AND sent_at IS NULL",
        tenant.0,
        id,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Mail not yet delivered by SMTP (or, with `all`, every mail), newest first.
pub async fn outbox(conn: &mut PgConnection, tenant: TenantId, all: bool, limit: i64) -> Result<Vec<Mail>> {
    Ok(sqlx::query_as!(
        Mail,
        r#"SELECT id, to_address AS "to", subject, body, created_at, sent_at FROM mail_outbox
          WHERE tenant_id = $1 AND ($2 OR sent_at IS NULL) ORDER BY created_at DESC, id DESC LIMIT $3"#,
        tenant.0,
        all,
        limit,
    )
    .fetch_all(conn)
    .await?)
}
