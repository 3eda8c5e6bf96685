//! Results over the inline cap (24,000 bytes) are stashed for 15 minutes and paged by id, so a
//! large answer, and above all a write's answer, is never silently dropped.

use uuid::Uuid;

use crate::{
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
};

pub const INLINE_CAP_BYTES: usize = 24_000;
pub const PAGE_BYTES: usize = 24_000;
pub const TTL_SECS: f64 = 900.0;
/// Stashed results one tenant keeps at most; the oldest go first.
pub const PER_TENANT: i64 = 64;

/// Stashes `body` (the serialized result); returns its id.
pub async fn put(db: &Db, tenant: TenantId, workspace: Uuid, actor: &str, address: &str, body: &str) -> Result<Uuid> {
    let id = Uuid::now_v7();
    db.single_decision(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            sqlx::query!(
                "INSERT INTO result_stash (tenant_id, id, workspace_id, actor_id, address, body, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))",
                tenant.0,
                id,
                workspace,
                actor,
                address,
                body,
                TTL_SECS,
            )
            .execute(&mut *conn)
            .await?;
            // Bounded per tenant, expired ones first: delete everything past the newest 64 or expired.
            sqlx::query!(
                "DELETE FROM result_stash WHERE tenant_id = $1 AND (expires_at <= now() OR id IN (
                     SELECT id FROM result_stash WHERE tenant_id = $1 ORDER BY created_at DESC OFFSET $2))",
                tenant.0,
                PER_TENANT,
            )
            .execute(&mut *conn)
            .await?;
            Ok(id)
        })
    })
    .await
}

/// A live stashed result of this caller: (address, body).
pub async fn get(db: &Db, tenant: TenantId, workspace: Uuid, actor: &str, id: Uuid) -> Result<Option<(String, String)>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let row = sqlx::query!(
                "SELECT address, body FROM result_stash
                 WHERE tenant_id = $1 AND id = $2 AND workspace_id = $3 AND actor_id = $4 AND expires_at > now()",
                tenant.0,
                id,
                workspace,
                actor,
            )
            .fetch_optional(&mut *conn)
            .await?;
            Ok(row.map(|r| (r.address, r.body)))
        })
    })
    .await
}

/// The page of `body` starting at byte `offset` (moved back to a character boundary), at most
/// [`PAGE_BYTES`] long; and where the next page starts, if there is one.
pub fn page(body: &str, offset: usize) -> (&str, usize, Option<usize>) {
    page_within(body, offset, PAGE_BYTES)
}

/// [`page`] with pages of at most `max` bytes (at least one character, so paging always moves on).
pub fn page_within(body: &str, offset: usize, max: usize) -> (&str, usize, Option<usize>) {
    let mut start = offset.min(body.len());
    while !body.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + max.max(1)).min(body.len());
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    if end == start && start < body.len() {
        end = start + body[start..].chars().next().map_or(0, char::len_utf8);
    }
    (&body[start..end], start, (end < body.len()).then_some(end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Walking the pages from 0 gives back the whole body, in order, each page bounded.
        #[test]
        fn pages_cover_the_body(body in "\\PC{0,60000}") {
            let mut rebuilt = String::new();
            let mut offset = 0;
            loop {
                let (chunk, start, next) = page(&body, offset);
                prop_assert_eq!(start, offset);
                prop_assert!(chunk.len() <= PAGE_BYTES);
                rebuilt.push_str(chunk);
                match next {
                    Some(n) => { prop_assert!(n > offset); offset = n; }
                    None => break,
                }
            }
            prop_assert_eq!(rebuilt, body);
        }
    }
}
