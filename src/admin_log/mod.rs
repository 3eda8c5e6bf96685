//! The append-only admin log: who changed what, with before/after, in the same transaction
//! as the change. The database refuses UPDATE and DELETE to the application role.

mod store;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::ids::TenantId;

/// Who acts, and under which request; threaded into every mutation.
#[derive(Clone, Debug)]
pub struct Audit {
    /// `cli`, `system`, `token:<id>`, `member:<id>` …
    pub actor: String,
    pub request_id: Option<String>,
}

impl Audit {
    pub fn cli() -> Self {
        Audit { actor: "cli".into(), request_id: None }
    }
}

/// One admin-log row to append.
#[derive(Debug)]
pub struct Entry<'a> {
    /// `None` for platform actions.
    pub tenant: Option<TenantId>,
    pub audit: &'a Audit,
    pub action: &'a str,
    pub target: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// One admin-log row as read back.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Record {
    pub id: Uuid,
    pub tenant_id: Option<Uuid>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub request_id: Option<String>,
    pub at: DateTime<Utc>,
}

pub use store::{Filter, list, list_filtered, record};
