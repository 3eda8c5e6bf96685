//! Browser sessions: a 256-bit random id in an HttpOnly cookie, only its SHA-256 stored, with
//! an idle and an absolute expiry, and a per-session CSRF token.

mod store;

pub use store::PRUNE;

use chrono::{DateTime, Utc};
use serde::Serialize;

use serde_json::json;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
    secrets,
};

/// A person: the issuer and subject of their ID tokens. It lives here so that sessions name
/// no member; `members`, which ends a removed member's sessions, re-exports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
pub struct Principal {
    pub issuer: String,
    pub subject: String,
}

/// Idle expiry, extended by use (at most one write a minute).
pub const IDLE_SECS: i64 = 12 * 3600;
/// Absolute expiry, never extended.
pub const ABSOLUTE_SECS: i64 = 7 * 24 * 3600;
/// Expired rows one write deletes at most.
pub const PRUNE_BATCH: i64 = 100;

#[derive(Clone, Debug, Serialize)]
pub struct Session {
    #[serde(skip)]
    pub id_hash: Vec<u8>,
    pub principal: Principal,
    pub email: Option<String>,
    pub display_name: Option<String>,
    pub csrf_token: String,
    pub created_at: DateTime<Utc>,
    pub idle_expires_at: DateTime<Utc>,
    pub absolute_expires_at: DateTime<Utc>,
    /// Signed in through this tenant's own connection (issue 22): the session acts in that
    /// tenant only. `None`: the deployment's provider.
    pub sso_tenant: Option<TenantId>,
}

impl Session {
    /// Whether this session may act in `tenant` at all (a tenant connection's session only in
    /// its own tenant).
    pub fn may_enter(&self, tenant: TenantId) -> bool {
        self.sso_tenant.is_none_or(|t| t == tenant)
    }
}

/// The cookie name: `__Host-` prefixed when the cookie is Secure, which pins it to this
/// host and path `/`.
pub fn cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-gh_session" } else { "gh_session" }
}

/// Creates a session inside the caller's transaction; returns the raw id for the cookie.
pub async fn create(
    conn: &mut sqlx::PgConnection,
    principal: &Principal,
    email: Option<&str>,
    name: Option<&str>,
    sso_tenant: Option<TenantId>,
) -> Result<(String, Session)> {
    store::prune(&mut *conn).await?;
    let raw = secrets::random_b64(32);
    let csrf = secrets::random_b64(32);
    let id_hash = secrets::digest(&raw);
    let new = store::NewSession { id_hash: &id_hash, principal, email, name, csrf: &csrf, sso_tenant };
    let session = store::insert(conn, &new, IDLE_SECS, ABSOLUTE_SECS).await?;
    Ok((raw, session))
}

/// The live session for a raw cookie value, its idle expiry extended when it is more than a
/// minute old. Malformed values are simply unknown.
#[tracing::instrument(name = "sessions::lookup", skip_all)]
pub async fn lookup(db: &Db, raw: &str) -> Result<Option<Session>> {
    if !secrets::well_formed(raw, "", 43) {
        return Ok(None);
    }
    let hash = secrets::digest(raw);
    db.serializable(Scope::Global, |conn, _| Box::pin(store::touch(conn, &hash, IDLE_SECS))).await
}

/// Ends one session (sign-out).
pub async fn end(conn: &mut sqlx::PgConnection, id_hash: &[u8]) -> Result<bool> {
    store::delete(conn, id_hash).await
}

/// Ends every session of a person (member removal).
pub async fn end_for_principal(conn: &mut sqlx::PgConnection, principal: &Principal) -> Result<u64> {
    store::end_for_principal(conn, principal).await
}

/// Signs out: ends the session and writes the admin-log row in one transaction.
pub async fn sign_out(db: &Db, session: &Session, audit: &Audit) -> Result<()> {
    db.serializable(Scope::Platform { reason: "sign out" }, |conn, _| {
        Box::pin(async move {
            if end(&mut *conn, &session.id_hash).await? {
                let p = &session.principal;
                let after = Some(json!({ "issuer": p.issuer, "subject": p.subject }));
                let target = format!("person:{}", p.subject);
                admin_log::record(conn, Entry { tenant: None, audit, action: "session.sign_out", target, before: None, after })
                    .await?;
            }
            Ok(())
        })
    })
    .await
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::prune;
}
