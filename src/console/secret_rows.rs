//! The list rows that access tokens and service credentials share on their console pages.

use super::{Console, PageError, when, when_opt, who};
use crate::AppState;

/// How the admin log's actors (`member:<id>`) read on a page: the member's email or name.
pub async fn creators(state: &AppState, c: &Console) -> Result<std::collections::HashMap<String, String>, PageError> {
    Ok(crate::members::list(&state.db, c.ctx.tenant.id)
        .await?
        .into_iter()
        .map(|m| (format!("member:{}", m.id), who(m.email.as_deref(), m.display_name.as_deref(), &m.subject)))
        .collect())
}

/// A machine secret (an access token or a service credential) as a row of its list page.
pub struct SecretRow {
    pub id: String,
    /// What identifies it without being secret: the token's prefix, the credential's client id.
    pub handle: String,
    pub name: String,
    pub creator: String,
    pub created: String,
    pub last_used: String,
    pub revoked: Option<String>,
}

/// What [`secret_rows`] needs of a token or a service credential.
pub struct Listed {
    pub id: String,
    pub handle: String,
    pub name: String,
    pub created_by: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The rows of a secrets list: live ones first, newest first within each group, creators by
/// name.
pub async fn secret_rows(state: &AppState, c: &Console, mut list: Vec<Listed>) -> Result<Vec<SecretRow>, PageError> {
    let names = creators(state, c).await?;
    list.sort_by(|a, b| a.revoked_at.is_some().cmp(&b.revoked_at.is_some()).then(b.created_at.cmp(&a.created_at)));
    Ok(list
        .into_iter()
        .map(|l| SecretRow {
            id: l.id,
            handle: l.handle,
            creator: names.get(&l.created_by).cloned().unwrap_or(l.created_by),
            name: l.name,
            created: when(&l.created_at),
            last_used: when_opt(&l.last_used_at),
            revoked: l.revoked_at.as_ref().map(when),
        })
        .collect())
}
