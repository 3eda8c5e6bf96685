//! Handshake-era agents' log levels, shared by every replica. An agent sets its level with
//! `logging/setLevel`, a POST any replica may serve, and its later requests may reach any
//! other replica; so the level is kept in PostgreSQL (`agent_log_levels`) under the session's
//! listener ([`super::subscriptions::listener`]). The replica serving a request reads it only
//! when it needs it: to send a 2026-07-28 downstream the level with the request, and to pass
//! on only the log messages at or above it. Each replica remembers what it read for
//! [`FRESH`], so a session costs at most one read per replica in that time, and a level set
//! on another replica applies within it.

#![allow(deprecated)] // logging is deprecated by the 2026 revision, and kept for the handshake era

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rmcp::model::LoggingLevel;
use uuid::Uuid;

use crate::{
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
};

/// How long a replica answers from what it read (or set) before reading again.
pub const FRESH: Duration = Duration::from_secs(2);

/// How long a level lasts without being set again: the agent's session is not tracked
/// anywhere (the endpoint is stateless), so an abandoned one ends on its own.
const TTL_SECS: f64 = 86_400.0;

/// Sessions remembered per replica before the stale ones are dropped.
const REMEMBERED: usize = 4096;

/// A session's level as this replica read (or set) it, and when.
type Known = (Option<LoggingLevel>, Instant);

/// This replica's view of the sessions' levels, by tenant and listener.
#[derive(Debug)]
pub struct LogLevels {
    db: Db,
    known: Mutex<HashMap<(Uuid, [u8; 32]), Known>>,
}

/// One handshake-era agent session's level, for its request's response stream.
#[derive(Clone, Debug)]
pub struct SessionLevel {
    levels: Arc<LogLevels>,
    tenant: TenantId,
    listener: [u8; 32],
}

impl SessionLevel {
    pub fn new(levels: Arc<LogLevels>, tenant: TenantId, listener: [u8; 32]) -> SessionLevel {
        SessionLevel { levels, tenant, listener }
    }

    /// The level the session set, if it set one.
    pub async fn get(&self) -> Option<LoggingLevel> {
        self.levels.get(self.tenant, &self.listener).await
    }
}

impl LogLevels {
    pub fn new(db: Db) -> LogLevels {
        LogLevels { db, known: Mutex::default() }
    }

    /// The level `listener` set, as this replica last read it (at most [`FRESH`] ago). A
    /// failed read counts as no level: log messages are advisory, the request goes on.
    pub async fn get(&self, tenant: TenantId, listener: &[u8; 32]) -> Option<LoggingLevel> {
        if let Some((level, at)) = self.known.lock().unwrap_or_else(|p| p.into_inner()).get(&(tenant.0, *listener))
            && at.elapsed() < FRESH
        {
            return *level;
        }
        let read = Box::pin(read(&self.db, tenant, *listener)).await;
        let level = read.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "an agent session's log level could not be read");
            None
        });
        self.remember(tenant, listener, level);
        level
    }

    /// Keeps `level` for `listener` (its day starts afresh); the tenant's expired levels go in
    /// the same transaction.
    pub async fn set(&self, tenant: TenantId, workspace: Uuid, listener: &[u8; 32], level: LoggingLevel) -> Result<()> {
        let (id, name) = (*listener, name(level));
        self.db
            .single_decision(Scope::Tenant(tenant), move |conn, _| {
                Box::pin(async move {
                    sqlx::query!("DELETE FROM agent_log_levels WHERE tenant_id = $1 AND expires_at <= now()", tenant.0)
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query!(
                        "INSERT INTO agent_log_levels (tenant_id, workspace_id, listener, level, expires_at)
                         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
                         ON CONFLICT (tenant_id, listener)
                         DO UPDATE SET level = EXCLUDED.level, expires_at = EXCLUDED.expires_at",
                        tenant.0,
                        workspace,
                        &id[..],
                        name,
                        TTL_SECS,
                    )
                    .execute(&mut *conn)
                    .await?;
                    Ok(())
                })
            })
            .await?;
        self.remember(tenant, listener, Some(level));
        Ok(())
    }

    fn remember(&self, tenant: TenantId, listener: &[u8; 32], level: Option<LoggingLevel>) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= REMEMBERED {
            known.retain(|_, (_, at)| at.elapsed() < FRESH);
            if known.len() >= REMEMBERED {
                known.clear();
            }
        }
        known.insert((tenant.0, *listener), (level, Instant::now()));
    }
}

async fn read(db: &Db, tenant: TenantId, listener: [u8; 32]) -> Result<Option<LoggingLevel>> {
    let name = db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let name = sqlx::query_scalar!(
                    "SELECT level FROM agent_log_levels WHERE tenant_id = $1 AND listener = $2 AND expires_at > now()",
                    tenant.0,
                    &listener[..],
                )
                .fetch_optional(&mut *conn)
                .await?;
                Ok(name)
            })
        })
        .await?;
    Ok(name.and_then(|n| serde_json::from_value(serde_json::Value::String(n)).ok()))
}

/// The level as the protocol spells it (and the table's check lists it).
fn name(level: LoggingLevel) -> &'static str {
    match level {
        LoggingLevel::Debug => "debug",
        LoggingLevel::Info => "info",
        LoggingLevel::Notice => "notice",
        LoggingLevel::Warning => "warning",
        LoggingLevel::Error => "error",
        LoggingLevel::Critical => "critical",
        LoggingLevel::Alert => "alert",
        LoggingLevel::Emergency => "emergency",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_is_named_as_the_protocol_spells_it() {
        for level in [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ] {
            assert_eq!(serde_json::to_value(level).unwrap(), name(level), "{level:?}");
        }
    }
}
