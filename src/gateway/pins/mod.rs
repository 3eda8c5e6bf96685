//! Pinned tool definitions (issue 23 §3): the first time a workspace sees a downstream tool,
//! its definition (name, title, description, input and output schema, annotations) is pinned
//! by digest. A server that later lists a different definition does not reach agents: the
//! change is quarantined (the pinned definition keeps being served, or the tool is hidden, as
//! the workspace's `pinning` says), a `drift` finding opens with the diff, and an admin
//! approves it (API or CLI) by the digest they reviewed. New tools of a connector whose first
//! catalog was already pinned are quarantined the same way when the workspace asks.
//!
//! The served catalog is derived in the catalog store's own transaction ([`apply`]), so every
//! replica serves exactly what the pins allow; an approval drops the stored catalog, which
//! bumps the tenant's epoch (every replica reads again) and makes the next call fetch afresh.

pub mod cli;
pub mod http;
mod store;

use chrono::{DateTime, Utc};
use rmcp::model::Tool;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use super::catalogs::Target;
use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    findings::Observation,
    ids::TenantId,
    workspaces::config::{OnChange, Pinning},
};

/// The fields of a tool's definition that are pinned (as MCP names them).
pub const PINNED_FIELDS: [&str; 6] = ["name", "title", "description", "inputSchema", "outputSchema", "annotations"];

/// A finding's diff shows at most this many characters of each side of a field.
const DIFF_SIDE_CAP: usize = 300;

/// One pin as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Pin {
    pub connector: String,
    pub tool: String,
    /// `pinned`, or `quarantined` while a different definition waits for approval.
    pub status: &'static str,
    /// The approved definition's digest (`None`: a new tool never approved).
    pub digest: Option<String>,
    pub pending_digest: Option<String>,
    /// Field by field, what the pending definition changes (`pinned`, `pending`).
    pub changes: Vec<Value>,
    pub pinned_at: DateTime<Utc>,
    pub changed_at: Option<DateTime<Utc>>,
    pub approved_at: Option<DateTime<Utc>>,
    pub approved_by: Option<String>,
}

impl Pin {
    fn of(row: store::PinRow) -> Pin {
        let changes = match &row.pending {
            Some(pending) => changes(row.definition.as_ref().unwrap_or(&Value::Null), pending),
            None => Vec::new(),
        };
        Pin {
            connector: row.connector,
            tool: row.tool,
            status: if row.pending_digest.is_some() { "quarantined" } else { "pinned" },
            digest: row.digest,
            pending_digest: row.pending_digest,
            changes,
            pinned_at: row.pinned_at,
            changed_at: row.changed_at,
            approved_at: row.approved_at,
            approved_by: row.approved_by,
        }
    }
}

/// Writes `v` as JSON with every object's keys sorted, so two servers (or two serializers)
/// that order keys differently give the same digest.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The pinned part of a definition: the [`PINNED_FIELDS`] it has (a `null` is absent).
fn pinned_part(definition: &Value) -> Value {
    let mut part = serde_json::Map::new();
    for field in PINNED_FIELDS {
        if let Some(v) = definition.get(field).filter(|v| !v.is_null()) {
            part.insert(field.to_owned(), v.clone());
        }
    }
    Value::Object(part)
}

fn canonical_text(v: &Value) -> String {
    let mut out = String::new();
    canonical(v, &mut out);
    out
}

/// The digest of a tool definition: SHA-256 of the canonical JSON of its pinned fields.
pub fn digest(definition: &Value) -> String {
    hex::encode(Sha256::digest(canonical_text(&pinned_part(definition)).as_bytes()))
}

/// The pinned fields that differ between two definitions, each with both sides.
pub fn changes(pinned: &Value, pending: &Value) -> Vec<Value> {
    PINNED_FIELDS
        .iter()
        .filter_map(|field| {
            let (a, b) = (pinned.get(field).filter(|v| !v.is_null()), pending.get(field).filter(|v| !v.is_null()));
            let same = match (a, b) {
                (Some(a), Some(b)) => canonical_text(a) == canonical_text(b),
                (None, None) => true,
                _ => false,
            };
            (!same).then(|| json!({ "field": field, "pinned": a, "pending": b }))
        })
        .collect()
}

/// `(readOnlyHint == true, destructiveHint == true)` of a definition.
fn hints(definition: &Value) -> (bool, bool) {
    let a = definition.get("annotations");
    let hint = |name| a.and_then(|a| a.get(name)).and_then(Value::as_bool) == Some(true);
    (hint("readOnlyHint"), hint("destructiveHint"))
}

/// The pinned definition as served while `pending` waits: with the stricter of the two
/// safety hints, so a server that now calls the tool a write (or destructive) is treated as
/// one before anyone approves, and a server that now calls it read-only is not believed.
pub fn guarded(pinned: &Value, pending: &Value) -> Value {
    let ((ro_p, de_p), (ro_q, de_q)) = (hints(pinned), hints(pending));
    let mut served = pinned.clone();
    if ((ro_p && !ro_q) || (!de_p && de_q))
        && let Some(map) = served.as_object_mut()
        && let Some(annotations) = map.entry("annotations").or_insert_with(|| json!({})).as_object_mut()
    {
        if ro_p && !ro_q {
            annotations.insert("readOnlyHint".into(), Value::Bool(false));
        }
        if !de_p && de_q {
            annotations.insert("destructiveHint".into(), Value::Bool(true));
        }
    }
    served
}

/// Caps one side of a diff line.
fn side(v: Option<&Value>) -> String {
    let text = v.map_or_else(|| "(absent)".to_owned(), canonical_text);
    let mut end = text.len().min(DIFF_SIDE_CAP);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() { format!("{}…", &text[..end]) } else { text }
}

/// The finding's message: which tool, what changed (each field's two sides, capped).
fn message(connector: &str, tool: &str, pinned: Option<&Value>, pending: &Value) -> String {
    let Some(pinned) = pinned else {
        return format!("connector {connector} lists a new tool `{tool}`: quarantined until an admin approves it");
    };
    let diff: Vec<String> = changes(pinned, pending)
        .iter()
        .map(|c| format!("{}: {} → {}", c["field"].as_str().unwrap_or(""), side(c.get("pinned")), side(c.get("pending"))))
        .collect();
    format!("tool {connector}.{tool} changed its definition (quarantined until an admin approves it); {}", diff.join("; "))
}

/// What the catalog store serves of a freshly listed catalog, and the findings it opens.
pub struct Applied {
    pub served: Vec<Value>,
    pub findings: Vec<Observation>,
}

/// Pins, quarantines and serves `listed` (the tools the server lists now, as JSON) in the
/// catalog store's transaction.
pub async fn apply(conn: &mut PgConnection, t: Target<'_>, listed: &[Value], at: DateTime<Utc>) -> Result<Applied> {
    let pins = store::for_connector(&mut *conn, t.tenant, t.workspace, t.connector_id).await?;
    let first_sight = pins.is_empty();
    let mut out = Applied { served: Vec::with_capacity(listed.len()), findings: Vec::new() };
    let pinning: Pinning = t.pinning;
    for definition in listed {
        let Some(name) = definition.get("name").and_then(Value::as_str) else { continue };
        let d = digest(definition);
        let pin = pins.iter().find(|p| p.tool == name);
        match pin {
            None if !first_sight && pinning.quarantine_new_tools => {
                store::insert(&mut *conn, t, name, None, Some((&d, definition))).await?;
                out.findings.push(observation(t, name, "tool_added", message(t.connector_id, name, None, definition), at));
            }
            None => {
                store::insert(&mut *conn, t, name, Some((&d, definition)), None).await?;
                out.served.push(definition.clone());
            }
            Some(p) if p.digest.as_deref() == Some(d.as_str()) => {
                // The server lists the approved definition (again): anything pending is moot.
                if p.pending_digest.is_some() {
                    store::set_pending(&mut *conn, t, name, None).await?;
                }
                out.served.push(definition.clone());
            }
            Some(p) => {
                if p.pending_digest.as_deref() != Some(d.as_str()) {
                    store::set_pending(&mut *conn, t, name, Some((&d, definition))).await?;
                    let (code, text) = match &p.definition {
                        Some(pinned) => ("definition_changed", message(t.connector_id, name, Some(pinned), definition)),
                        None => ("tool_added", message(t.connector_id, name, None, definition)),
                    };
                    out.findings.push(observation(t, name, code, text, at));
                }
                if let (Some(pinned), OnChange::ServePinned) = (&p.definition, pinning.on_change) {
                    out.served.push(guarded(pinned, definition));
                }
            }
        }
    }
    Ok(out)
}

fn observation(t: Target<'_>, tool: &str, code: &str, message: String, at: DateTime<Utc>) -> Observation {
    Observation {
        tenant: t.tenant.0,
        kind: "drift",
        subject: format!("{}/{}/{tool}", t.workspace, t.connector_id),
        operation: "catalog.pin".into(),
        code: code.into(),
        count: 1,
        first: at,
        last: at,
        message,
    }
}

/// A workspace's pins (`quarantined_only`: those waiting for approval), by connector and tool.
pub async fn list(db: &Db, tenant: TenantId, slug: &str, quarantined_only: bool) -> Result<Vec<Pin>> {
    let bound = crate::workspaces::bound(db, tenant, slug).await?;
    let workspace = bound.workspace.id.0;
    let rows = db
        .single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::list(conn, tenant, workspace, quarantined_only)))
        .await?;
    Ok(rows.into_iter().map(Pin::of).collect())
}

/// Approves the pending definition of `connector.tool`, named by the digest the approver
/// reviewed (compare-and-set: a definition that changed again since is refused with 412
/// `pin_changed`, nothing pending is 409 `pin_not_quarantined`). The stored catalog is dropped
/// in the same transaction, so every replica fetches and serves the approved definition.
pub async fn approve(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    connector: &str,
    tool: &str,
    reviewed: &str,
) -> Result<Pin> {
    let bound = crate::workspaces::bound(db, tenant, slug).await?;
    if !bound.document.connectors.contains_key(connector) {
        return Err(Error::NotFound { what: "connector" });
    }
    let workspace = bound.workspace.id.0;
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let Some(before) = store::get(&mut *conn, tenant, workspace, connector, tool).await? else {
                return Err(Error::NotFound { what: "tool pin" });
            };
            if before.pending_digest.is_none() {
                return Err(Error::Conflict {
                    code: "pin_not_quarantined",
                    message: format!("{connector}.{tool} has no definition waiting for approval"),
                });
            }
            let Some(after) = store::approve(&mut *conn, tenant, workspace, connector, tool, reviewed, &audit.actor).await?
            else {
                return Err(Error::Precondition {
                    code: "pin_changed",
                    message: "the pending definition is not the one reviewed (its digest differs); review it again".into(),
                });
            };
            super::catalogs::forget(&mut *conn, tenant, workspace, connector).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "tool_pin.approve",
                target: format!("tool:{slug}/{connector}.{tool}"),
                before: Some(json!({ "digest": before.digest, "pending_digest": before.pending_digest })),
                after: Some(json!({ "digest": after.digest })),
            };
            admin_log::record(conn, entry).await?;
            Ok(Pin::of(after))
        })
    })
    .await
}

/// A tool definition as JSON (as the server listed it).
pub fn as_json(tools: &[Tool]) -> Result<Vec<Value>> {
    tools.iter().map(|t| serde_json::to_value(t).map_err(|e| Error::Internal(e.into()))).collect()
}

#[cfg(test)]
mod tests;
