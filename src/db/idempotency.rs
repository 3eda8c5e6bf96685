//! How a mutating API call's `Idempotency-Key` is recorded by the transaction that carries
//! out the mutation (see [`crate::idempotency`] for the rest): the request's key travels in a
//! task-local [`Pending`]; once the tenant extractor has checked the key against what is
//! stored, it arms it for that tenant, and the first transaction of that tenant that wrote
//! anything inserts the key's row just before its COMMIT. Two concurrent duplicates thus
//! cannot both commit: the second one's insert waits for the first to commit, finds the key
//! taken, and rolls its own work back.

use std::sync::{Arc, Mutex};

use sqlx::PgConnection;

use super::Scope;
use crate::{
    error::{Error, Result},
    ids::TenantId,
};

tokio::task_local! {
    static PENDING: Arc<Pending>;
}

/// One request's key, the digest of what it asked, and how far it got.
#[derive(Debug)]
pub struct Pending {
    pub key: String,
    /// What the request asked (method, path, query, body).
    request: Vec<u8>,
    /// The request bound to who asked (see [`Pending::bind`]): what the key's row records.
    digest: std::sync::OnceLock<Vec<u8>>,
    phase: Mutex<Phase>,
}

/// Where a request with a key stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not checked yet (no tenant extractor ran, or it refused the request first).
    Unchecked,
    /// Checked for this tenant, nothing stored: the first transaction that writes claims it.
    Armed(TenantId),
    /// A request with this key already answered (or is answering): the caller replays that.
    Replay(TenantId),
    /// Claimed; COMMIT sent, no answer yet.
    Committing(TenantId),
    /// Claimed, and the claim committed with the mutation: the answer is to be stored.
    Claimed(TenantId),
    /// Another request with this key committed first; this one's work was rolled back.
    Lost(TenantId),
    /// The COMMIT carrying the claim got no answer: whether it holds is unknown.
    Unknown(TenantId),
}

impl Pending {
    /// A key for a request whose method, path, query and body digest to `request`.
    pub fn new(key: String, request: Vec<u8>) -> Arc<Self> {
        Arc::new(Pending { key, request, digest: Default::default(), phase: Mutex::new(Phase::Unchecked) })
    }

    /// Binds the request to the actor who sent it, so the same key and body from another
    /// member or token of the tenant is a different request (and never sees this answer).
    pub fn bind(&self, actor: &str) -> &[u8] {
        self.digest.get_or_init(|| {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            h.update(&self.request);
            h.update(actor.as_bytes());
            h.finalize().to_vec()
        })
    }

    /// The digest the key's row records (empty until bound).
    pub fn digest(&self) -> &[u8] {
        self.digest.get().map_or(&[], Vec::as_slice)
    }

    pub fn phase(&self) -> Phase {
        self.phase.lock().map(|p| p.clone()).unwrap_or(Phase::Unchecked)
    }

    fn set(&self, phase: Phase) {
        if let Ok(mut p) = self.phase.lock() {
            *p = phase;
        }
    }
}

/// Runs `f` (the rest of the request) with `pending` as its key.
pub async fn scope<F: std::future::Future>(pending: Arc<Pending>, f: F) -> F::Output {
    PENDING.scope(pending, f).await
}

/// The current request's key, if it carries one and it is not checked yet.
pub fn unchecked() -> Option<Arc<Pending>> {
    PENDING.try_with(|p| p.clone()).ok().filter(|p| p.phase() == Phase::Unchecked)
}

/// Marks the current request's key as checked for `tenant` (nothing stored under it).
pub fn arm(tenant: TenantId) {
    let _ = PENDING.try_with(|p| p.set(Phase::Armed(tenant)));
}

/// Marks the current request as a replay of what is stored under its key.
pub fn replay(tenant: TenantId) {
    let _ = PENDING.try_with(|p| p.set(Phase::Replay(tenant)));
}

/// Whether the current request's key waits to be claimed by a transaction of `scope`'s
/// tenant: such a mutation must run in a transaction (the claim is a statement of it), never
/// as a lone autocommitted statement.
pub(super) fn armed_for(scope: Scope) -> bool {
    let Ok(pending) = PENDING.try_with(|p| p.clone()) else { return false };
    matches!((pending.phase(), scope), (Phase::Armed(tenant), Scope::Tenant(within)) if tenant == within)
}

/// Inside a transaction about to commit: if the request's key is armed for this tenant and
/// the transaction wrote something, inserts the key's row (or takes over an expired one).
/// When another request holds the key, answers an error, so the transaction rolls back.
pub(super) async fn claim(conn: &mut PgConnection, scope: Scope) -> Result<()> {
    let Ok(pending) = PENDING.try_with(|p| p.clone()) else { return Ok(()) };
    let (Phase::Armed(tenant), Scope::Tenant(within)) = (pending.phase(), scope) else { return Ok(()) };
    if tenant != within {
        return Ok(());
    }
    // A transaction that wrote nothing (a read before the mutation) has no transaction id.
    let wrote =
        sqlx::query_scalar!(r#"SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS "wrote!""#).fetch_one(&mut *conn).await?;
    if !wrote {
        return Ok(());
    }
    let claimed = sqlx::query_scalar!(
        r#"INSERT INTO idempotency_keys AS k (tenant_id, key, request_digest, created_at) VALUES ($1, $2, $3, clock_timestamp())
           ON CONFLICT (tenant_id, key) DO UPDATE
              SET request_digest = EXCLUDED.request_digest, created_at = clock_timestamp(), status = NULL, content_type = NULL, body = NULL
            WHERE k.created_at < now() - make_interval(secs => $4)
           RETURNING true AS "claimed!""#,
        tenant.0,
        &pending.key,
        pending.digest(),
        KEPT.as_secs_f64(),
    )
    .fetch_optional(&mut *conn)
    .await?;
    if claimed.is_none() {
        pending.set(Phase::Lost(tenant));
        return Err(Error::Conflict {
            code: "idempotency_key_in_progress",
            message: "another request with this Idempotency-Key was carried out first".into(),
        });
    }
    pending.set(Phase::Committing(tenant));
    Ok(())
}

/// The claim (if this transaction carried one) committed.
pub(super) fn committed() {
    let _ = PENDING.try_with(|p| {
        if let Phase::Committing(t) = p.phase() {
            p.set(Phase::Claimed(t));
        }
    });
}

/// The server refused the COMMIT that carried the claim (if any): nothing holds, and a retry
/// of the transaction claims again.
pub(super) fn rolled_back() {
    let _ = PENDING.try_with(|p| {
        if let Phase::Committing(t) = p.phase() {
            p.set(Phase::Armed(t));
        }
    });
}

/// The COMMIT that carried the claim (if any) got no answer.
pub(super) fn commit_unknown() {
    let _ = PENDING.try_with(|p| {
        if let Phase::Committing(t) = p.phase() {
            p.set(Phase::Unknown(t));
        }
    });
}

/// How long a key and its answer are kept.
pub const KEPT: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);
