//! Signed connect URLs: a member's link to authorize a connector (HMAC of the active vault
//! key, 15 minutes by the database's clock), and whether that member still may.

use serde::Deserialize;
use uuid::Uuid;

use super::{CONNECT_TTL_SECS, ring};
use crate::{
    AppState,
    db::Scope,
    error::{Error, Result},
    ids::TenantId,
    members::{self, Permission},
    workspaces::config::SlotKind,
};

/// The database clock, in Unix seconds (signed URLs expire by it, like everything else).
async fn db_now(state: &AppState) -> Result<i64> {
    state
        .db
        .single_decision(Scope::Global, |conn, _| {
            Box::pin(async move {
                Ok(sqlx::query_scalar!(r#"SELECT extract(epoch FROM now())::bigint AS "now!""#).fetch_one(conn).await?)
            })
        })
        .await
}

fn connect_message(tenant: &str, workspace: &str, connector: &str, member: Uuid, expires: i64) -> String {
    format!("gatehouse-connect|v1|{tenant}|{workspace}|{connector}|{member}|{expires}")
}

/// A signed connect URL for `member` to authorize `connector` (valid 15 minutes).
pub async fn connect_url(state: &AppState, tenant: &str, workspace: &str, connector: &str, member: Uuid) -> Result<String> {
    let ring = ring(state)?;
    let expires = db_now(state).await? + CONNECT_TTL_SECS;
    let (kid, sig) = ring.sign_link(connect_message(tenant, workspace, connector, member, expires).as_bytes());
    let mut url = url::Url::parse(&format!("{}/oauth/connect", state.config.public_url.trim_end_matches('/')))
        .map_err(|e| anyhow::anyhow!("bad public URL: {e}"))?;
    url.query_pairs_mut()
        .append_pair("t", tenant)
        .append_pair("w", workspace)
        .append_pair("c", connector)
        .append_pair("m", &member.to_string())
        .append_pair("exp", &expires.to_string())
        .append_pair("k", kid)
        .append_pair("sig", &sig);
    Ok(url.to_string())
}

/// A connect URL's parameters.
#[derive(Debug, Deserialize)]
pub struct ConnectParams {
    pub t: String,
    pub w: String,
    pub c: String,
    pub m: Uuid,
    pub exp: i64,
    pub k: String,
    pub sig: String,
}

/// Checks a connect URL's signature and expiry (database clock).
pub async fn verify_connect(state: &AppState, p: &ConnectParams) -> Result<()> {
    let ring = ring(state)?;
    let message = connect_message(&p.t, &p.w, &p.c, p.m, p.exp);
    if !ring.verify_link(&p.k, message.as_bytes(), &p.sig) {
        return Err(Error::Forbidden { code: "invalid_link", message: "this connect link is not valid".into() });
    }
    if db_now(state).await? >= p.exp {
        return Err(Error::Forbidden {
            code: "link_expired",
            message: "this connect link has expired; ask for a new one".into(),
        });
    }
    Ok(())
}

/// Whether `member` (still) may authorize a grant of this kind.
pub(super) async fn check_member(state: &AppState, tenant: TenantId, member: Uuid, kind: SlotKind) -> Result<()> {
    let permitted = state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let Some(m) = members::tx::get(&mut *conn, tenant, member).await? else { return Ok(false) };
                let p = members::permissions(conn, tenant, m.role).await?;
                Ok(match kind {
                    SlotKind::Shared => p.has(Permission::CredentialAdministration),
                    SlotKind::Personal => p.has(Permission::ConnectorAccess),
                })
            })
        })
        .await?;
    if permitted {
        Ok(())
    } else {
        Err(Error::Forbidden { code: "permission_denied", message: "you may not authorize this connector".into() })
    }
}
