//! The revocation sweep: every replica, at start and then on a timer, claims revocation intents
//! that a disconnect left without an outcome (a crash between the intent and the provider's
//! answer), sends the revocation once more (RFC 7009 revocation is idempotent), and settles
//! each exactly once: `revoked`, `failed`, or `unknown` when the tokens cannot be opened any
//! more. Anything but `revoked` is also an ops failure. Settled intents are pruned after 30
//! days, a bounded batch per pass.

use super::*;

/// An intent is left alone this long: longer than a disconnect's revocation calls can take.
pub const GRACE_SECS: i64 = 120;
/// A sweep's claim on an intent lasts this long (longer than its retry can take).
pub const CLAIM_SECS: i64 = 90;
/// Intents one pass claims at most.
pub const BATCH: i64 = 50;
/// How often each replica sweeps.
pub const EVERY: Duration = Duration::from_secs(60);
/// Settled intents are kept this long.
pub const RETENTION_DAYS: i32 = 30;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub revoked: u64,
    pub failed: u64,
    pub unknown: u64,
    pub pruned: u64,
}

const SCOPE: Scope = Scope::Platform { reason: "oauth revocation sweep" };

/// Sweeps now and then every [`EVERY`], until the task is dropped.
pub async fn run(state: AppState) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match once(&state).await {
            Ok(s) if s != Swept::default() => tracing::info!(?s, "revocation sweep"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "revocation sweep failed"),
        }
    }
}

/// One bounded pass.
pub async fn once(state: &AppState) -> Result<Swept> {
    let mut swept = Swept::default();
    let stale =
        state.db.single_decision(SCOPE, |conn, _| Box::pin(store::claim_stale(conn, GRACE_SECS, CLAIM_SECS, BATCH))).await?;
    for intent in &stale {
        let outcome = retry(state, intent).await;
        let audit = Audit { actor: "system:oauth_sweep".into(), request_id: None };
        let audit = &audit;
        let settled = state
            .db
            .single_decision(SCOPE, move |conn, _| {
                Box::pin(async move {
                    if !store::settle_intent(&mut *conn, intent.tenant, intent.id, outcome, "sweep").await? {
                        return Ok(false);
                    }
                    let entry = Entry {
                        tenant: Some(intent.tenant),
                        audit,
                        action: "oauth.revocation",
                        target: format!("connector:{}/grant:{}", intent.connector, intent.owner),
                        before: None,
                        after: Some(json!({ "outcome": outcome, "intent": intent.id, "swept": true })),
                    };
                    admin_log::record(conn, entry).await?;
                    Ok(true)
                })
            })
            .await?;
        if !settled {
            continue;
        }
        match outcome {
            "revoked" => swept.revoked += 1,
            "failed" => swept.failed += 1,
            _ => swept.unknown += 1,
        }
        if outcome != "revoked" {
            state.ops.record(crate::ops::Failure {
                operation: "oauth.revocation",
                stage: "sweep".into(),
                tenant: Some(intent.tenant.0),
                workspace: Some(intent.workspace),
                status: crate::ops::Status::Failed,
                code: format!("revocation_{outcome}"),
                message: format!(
                    "a revocation of connector `{}` left without an outcome was settled as {outcome}",
                    intent.connector
                ),
                reference: None,
            });
        }
    }
    swept.pruned = state.db.single_decision(SCOPE, |conn, _| Box::pin(store::prune_settled(conn, RETENTION_DAYS, 1000))).await?;
    Ok(swept)
}

/// Sends the revocation again: `revoked`, `failed`, or `unknown` (the tokens or the client's
/// secret cannot be opened).
async fn retry(state: &AppState, i: &store::Stale) -> &'static str {
    let (Some(ring), Some(owner), Some(envelope)) =
        (state.config.vault_keys.as_ref(), crate::vault::slots::parse_owner(&i.owner), i.envelope.as_deref())
    else {
        return "unknown";
    };
    let Some(tokens) = ring
        .open(&aad(i.tenant, i.workspace, &i.connector, owner, PURPOSE_OAUTH_GRANT), envelope)
        .ok()
        .and_then(|p| serde_json::from_slice::<Tokens>(&p).ok())
    else {
        return "unknown";
    };
    let method = Method::parse(&i.client_auth).unwrap_or(Method::None);
    match Creds::load(state, i.tenant, i.workspace, &i.connector, &i.client_id, method).await {
        Ok(creds) => disconnect::revoke_tokens(state, &creds, &i.endpoint, &tokens, &i.connector).await,
        Err(_) => "unknown",
    }
}
