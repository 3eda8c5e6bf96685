//! A per-tenant key-value store with TTLs judged by the database clock, and a
//! compare-and-set that is one conditional statement (see [`Db::single_decision`]).
//!
//! Limits: keys are 1–512 bytes of UTF-8 without control characters (NUL included); values
//! are any JSON up to 65,536 bytes serialized; TTLs 1 ms to 365 days; pages 1–1,000 keys.
//! Values compare as `jsonb` (key order and number spelling do not matter). An expired
//! entry is absent everywhere; expired rows are deleted, at most 100 per write, on write.

pub mod cli;
pub mod http;
mod store;

pub use store::PRUNE;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    admin_log::{self, Audit, Entry as LogEntry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

pub const MAX_KEY_BYTES: usize = 512;
pub const MAX_VALUE_BYTES: usize = 65_536;
pub const MAX_TTL_MS: u64 = 365 * 24 * 3600 * 1000;
pub const MAX_PAGE: u32 = 1000;
/// Expired rows one write deletes at most.
pub const PRUNE_BATCH: i64 = 100;
/// One write in this many prunes, drawn at random per write. Each write leaves at most one
/// row that can expire, and a due write deletes up to [`PRUNE_BATCH`] of them, so a backlog
/// still shrinks by several rows a write on average (`docs/decisions.md`, "The key-value
/// prune's cadence: one write in 16").
pub const PRUNE_EVERY: u32 = 16;

/// Whether this write prunes: true once in [`PRUNE_EVERY`] draws.
fn prune_due(rng: &mut impl rand::Rng) -> bool {
    rng.random_ratio(1, PRUNE_EVERY)
}

/// The expired rows of `tenant` that this write deletes first, if it is due.
async fn prune_if_due(conn: &mut sqlx::PgConnection, tenant: TenantId) -> Result<()> {
    if prune_due(&mut rand::rng()) {
        store::prune(conn, tenant).await?;
    }
    Ok(())
}

/// A key that passed validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key(String);

impl Key {
    pub fn parse(raw: &str) -> Result<Key> {
        if raw.is_empty() || raw.len() > MAX_KEY_BYTES {
            return Err(Error::invalid("invalid_key", Some("key"), format!("a key is 1 to {MAX_KEY_BYTES} bytes")));
        }
        if raw.chars().any(char::is_control) {
            return Err(Error::invalid("invalid_key", Some("key"), "a key may not contain NUL or other control characters"));
        }
        Ok(Key(raw.to_owned()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A value that passed the size check.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundedValue(Value);

impl BoundedValue {
    pub fn parse(value: Value) -> Result<Self> {
        let size = serde_json::to_vec(&value).map_err(anyhow::Error::from)?.len();
        if size > MAX_VALUE_BYTES {
            return Err(Error::invalid(
                "value_too_large",
                Some("value"),
                format!("a value is at most {MAX_VALUE_BYTES} bytes of JSON; this one is {size}"),
            ));
        }
        Ok(BoundedValue(value))
    }
    pub fn into_inner(self) -> Value {
        self.0
    }
}

/// Checks a TTL in milliseconds.
pub fn validate_ttl(ttl_ms: Option<u64>) -> Result<Option<i64>> {
    match ttl_ms {
        None => Ok(None),
        Some(ms) if (1..=MAX_TTL_MS).contains(&ms) => Ok(Some(ms as i64)),
        Some(_) => Err(Error::invalid("invalid_ttl", Some("ttl_ms"), format!("ttl_ms is from 1 to {MAX_TTL_MS}"))),
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Entry {
    pub key: String,
    pub value: Value,
    pub expires_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// What a compare-and-set expects to find.
#[derive(Clone, Debug)]
pub enum Expect {
    Absent,
    Value(BoundedValue),
}

/// What a compare-and-set leaves behind when it wins.
#[derive(Clone, Debug)]
pub enum Next {
    Value(BoundedValue),
    Delete,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Page {
    pub entries: Vec<Entry>,
    /// Pass as `after` to get the next page; absent on the last page.
    pub next: Option<String>,
}

pub async fn get(db: &Db, tenant: TenantId, key: &Key) -> Result<Option<Entry>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::get(conn, tenant, key.as_str()))).await
}

/// Sets `key` unconditionally. Serializable, so the admin log's "before" is exactly the
/// value this write replaced.
pub async fn set(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    key: &Key,
    value: &BoundedValue,
    ttl_ms: Option<i64>,
) -> Result<Entry> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            prune_if_due(&mut *conn, tenant).await?;
            let (entry, before) = store::upsert(&mut *conn, tenant, key.as_str(), &value.0, ttl_ms).await?;
            log(
                conn,
                tenant,
                audit,
                "kv.set",
                key,
                before,
                Some(json!({ "value": entry.value, "expires_at": entry.expires_at })),
            )
            .await?;
            Ok(entry)
        })
    })
    .await
}

/// Deletes `key`; false when there was nothing live to delete.
pub async fn delete(db: &Db, tenant: TenantId, audit: &Audit, key: &Key) -> Result<bool> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            prune_if_due(&mut *conn, tenant).await?;
            let Some(before) = store::delete(&mut *conn, tenant, key.as_str(), None).await? else { return Ok(false) };
            log(conn, tenant, audit, "kv.delete", key, Some(before), None).await?;
            Ok(true)
        })
    })
    .await
}

/// Keys starting with `prefix`, after `after`, in bytewise order.
pub async fn list(db: &Db, tenant: TenantId, prefix: &str, after: Option<&str>, limit: u32) -> Result<Page> {
    if prefix.len() > MAX_KEY_BYTES || prefix.chars().any(char::is_control) {
        return Err(Error::invalid("invalid_prefix", Some("prefix"), "a prefix follows the rules of a key"));
    }
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::invalid("invalid_limit", Some("limit"), format!("limit is from 1 to {MAX_PAGE}")));
    }
    let upper = prefix_upper_bound(prefix);
    let entries = db
        .single_decision(Scope::Tenant(tenant), |conn, _| {
            Box::pin(store::list(conn, tenant, prefix, upper.as_deref(), after, limit as i64))
        })
        .await?;
    let next = (entries.len() == limit as usize).then(|| entries.last().map(|e| e.key.clone())).flatten();
    Ok(Page { entries, next })
}

/// Replaces the live value of `key` with `next` only if it is what `expect` says (absent,
/// or equal to a value). True when this call won; a refusal writes nothing.
pub async fn compare_and_set(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    key: &Key,
    expect: &Expect,
    next: &Next,
    ttl_ms: Option<i64>,
) -> Result<bool> {
    compare_and_set_as(db, CasForm::Statement, tenant, audit, key, expect, next, ttl_ms).await
}

/// How a compare-and-set reaches the database. Both decide and log alike (`tests/kv.rs` runs
/// its semantics through each); the benchmark compares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasForm {
    /// One autocommitted statement that takes its own scope (one round trip), where
    /// [`Db::one_statement_fits`]; the transaction otherwise.
    Statement,
    /// A transaction: BEGIN with the scope, the statement, COMMIT (three round trips).
    Transaction,
}

/// [`compare_and_set`] in the form asked for (see [`CasForm`]).
#[allow(clippy::too_many_arguments)]
pub async fn compare_and_set_as(
    db: &Db,
    form: CasForm,
    tenant: TenantId,
    audit: &Audit,
    key: &Key,
    expect: &Expect,
    next: &Next,
    ttl_ms: Option<i64>,
) -> Result<bool> {
    // The decision is one conditional statement, and the admin log's before/after are the
    // expected and next values, so this needs no serializable snapshot. The prune, the decision
    // and the log row are one statement; where it may, that statement also takes its own scope
    // and commits alone (one round trip, see `Db::one_statement`), else it runs in a
    // transaction (three: BEGIN with the scope, the statement, COMMIT).
    let alone = form == CasForm::Statement && db.one_statement_fits(Scope::Tenant(tenant));
    let k = key.as_str();
    let (decision, before, after) = match (expect, next) {
        (Expect::Absent, Next::Value(v)) => (store::Decision::InsertIfAbsent { value: &v.0, ttl_ms }, None, Some(&v.0)),
        (Expect::Value(e), Next::Value(v)) => {
            (store::Decision::UpdateIfEqual { expected: &e.0, next: &v.0, ttl_ms }, Some(&e.0), Some(&v.0))
        }
        (Expect::Value(e), Next::Delete) => (store::Decision::DeleteIfEqual { expected: &e.0 }, Some(&e.0), None),
        // Nothing to change: the expectation is the whole answer.
        (Expect::Absent, Next::Delete) => {
            return db
                .single_decision(Scope::Tenant(tenant), |conn, _| {
                    Box::pin(async move {
                        prune_if_due(&mut *conn, tenant).await?;
                        Ok(store::get(&mut *conn, tenant, k).await?.is_none())
                    })
                })
                .await;
        }
    };
    let prune = if prune_due(&mut rand::rng()) { PRUNE_BATCH } else { 0 };
    let logged = || store::Logged {
        id: uuid::Uuid::now_v7(),
        audit,
        target: format!("kv:{k}"),
        before: before.map(|v| json!({ "value": v })),
        after: after.map(|v| json!({ "value": v })),
    };
    if alone {
        db.one_statement(|conn, _| Box::pin(store::compare_and_set(conn, tenant, k, decision, prune, logged()))).await
    } else {
        db.single_decision(Scope::Tenant(tenant), |conn, _| {
            Box::pin(store::compare_and_set(conn, tenant, k, decision, prune, logged()))
        })
        .await
    }
}

async fn log(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    action: &str,
    key: &Key,
    before: Option<Value>,
    after: Option<Value>,
) -> Result<()> {
    let before = before.map(|v| json!({ "value": v }));
    admin_log::record(
        conn,
        LogEntry { tenant: Some(tenant), audit, action, target: format!("kv:{}", key.as_str()), before, after },
    )
    .await
}

/// The least string greater than every string that starts with `prefix`, in code-point
/// (= UTF-8 byte, = `COLLATE "C"`) order; `None` when no such bound exists.
pub fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..=0xDFFF).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_write_in_sixteen_prunes() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        let draws = 16_000;
        let due = (0..draws).filter(|_| prune_due(&mut rng)).count();
        // 1,000 expected, standard deviation 31.
        assert!((850..1150).contains(&due), "{due} of {draws} draws were due");
    }

    #[test]
    fn keys_are_validated() {
        assert!(Key::parse("a").is_ok());
        assert!(Key::parse("").is_err());
        assert!(Key::parse("a\0b").is_err());
        assert!(Key::parse("a\nb").is_err());
        assert!(Key::parse(&"x".repeat(512)).is_ok());
        assert!(Key::parse(&"x".repeat(513)).is_err());
        assert!(Key::parse(&"é".repeat(257)).is_err(), "the limit counts bytes, not characters");
    }

    #[test]
    fn values_are_bounded() {
        assert!(BoundedValue::parse(json!("x".repeat(MAX_VALUE_BYTES - 2))).is_ok());
        assert!(BoundedValue::parse(json!("x".repeat(MAX_VALUE_BYTES - 1))).is_err());
    }

    #[test]
    fn upper_bound_edges() {
        assert_eq!(prefix_upper_bound(""), None);
        assert_eq!(prefix_upper_bound("ab").as_deref(), Some("ac"));
        assert_eq!(prefix_upper_bound("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_upper_bound("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_upper_bound("\u{10FFFF}"), None);
    }

    proptest! {
        /// Every string with the prefix sorts below the bound, and the bound does not have it.
        #[test]
        fn upper_bound_is_tight(prefix in "\\PC{0,6}", rest in "\\PC{0,6}", other in "\\PC{0,8}") {
            let with_prefix = format!("{prefix}{rest}");
            match prefix_upper_bound(&prefix) {
                Some(upper) => {
                    prop_assert!(with_prefix.as_str() < upper.as_str());
                    prop_assert!(!upper.starts_with(&prefix));
                    if other.as_str() >= prefix.as_str() && other.as_str() < upper.as_str() {
                        prop_assert!(other.starts_with(&prefix));
                    }
                }
                None => prop_assert!(prefix.chars().all(|c| c == char::MAX), "no bound for {:?}", prefix),
            }
        }

        #[test]
        fn key_parse_never_panics(raw in "\\PC{0,600}|[\\x00-\\x1f]{0,4}") {
            if let Ok(k) = Key::parse(&raw) {
                prop_assert!(!k.as_str().is_empty() && k.as_str().len() <= MAX_KEY_BYTES);
            }
        }
    }
}
