//! Credential slots: per connector, the workspace's shared credential or each member's own,
//! sealed by the vault. Values go in and never come out of the API: only metadata (field
//! names, the last four characters of values of 12 or more, when and by whom).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;
use zeroize::Zeroizing;

pub use super::store::Stored;
use super::{Aad, KeyRing, Owner, PURPOSE_CONNECTOR, Unreadable, store};
use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    workspaces::{self, Connector, config::SlotKind},
};

pub const MAX_FIELDS: usize = 16;
pub const MAX_VALUE_BYTES: usize = 4096;
/// Values at least this long show their last four characters in metadata.
pub const LAST_FOUR_FROM: usize = 12;

/// A slot's fields with their values: zeroed when dropped, never printed (Debug shows names).
pub struct Fields(pub BTreeMap<String, String>);

impl Drop for Fields {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        for value in self.0.values_mut() {
            value.zeroize();
        }
    }
}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// Which slot: a workspace's connector and whose credential.
#[derive(Clone, Copy, Debug)]
pub struct Slot<'a> {
    pub tenant: TenantId,
    pub workspace: Uuid,
    pub connector: &'a str,
    pub owner: Owner,
}

impl Slot<'_> {
    pub fn aad(&self) -> Aad<'_> {
        Aad {
            tenant: self.tenant.0,
            workspace: self.workspace,
            connector: self.connector,
            owner: self.owner,
            purpose: PURPOSE_CONNECTOR,
        }
    }
}

/// What the API and CLI show of a slot.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Metadata {
    pub connector: String,
    pub slot: &'static str,
    pub owner: String,
    pub state: &'static str,
    pub fields: Vec<FieldMeta>,
    pub version: Option<i64>,
    pub key_id: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct FieldMeta {
    pub name: String,
    /// The last four characters, for values of 12 characters or more.
    pub last4: Option<String>,
}

fn field_meta(fields: &BTreeMap<String, String>) -> Vec<FieldMeta> {
    fields
        .iter()
        .map(|(name, value)| {
            let n = value.chars().count();
            let last4 = (n >= LAST_FOUR_FROM).then(|| value.chars().skip(n - 4).collect());
            FieldMeta { name: name.clone(), last4 }
        })
        .collect()
}

fn metadata(connector: &str, kind: SlotKind, owner: Owner, row: Option<&Stored>) -> Metadata {
    Metadata {
        connector: connector.to_owned(),
        slot: kind.as_str(),
        owner: owner.as_text(),
        state: if row.is_some() { "set" } else { "missing" },
        fields: row.and_then(|r| serde_json::from_value(r.fields.clone()).ok()).unwrap_or_default(),
        version: row.map(|r| r.version),
        key_id: row.map(|r| r.key_id.clone()),
        updated_at: row.map(|r| r.updated_at),
        updated_by: row.map(|r| r.updated_by.clone()),
    }
}

/// The vault, or `vault_disabled`.
pub fn require(ring: Option<&KeyRing>) -> Result<&KeyRing> {
    ring.ok_or_else(|| Error::Conflict {
        code: "vault_disabled",
        message: "credential slots need the vault: set GATEHOUSE_VAULT_KEYS on every replica".into(),
    })
}

/// Refuses a connector that takes a credential slot (or OAuth, whose tokens the vault seals)
/// when the vault is off.
pub fn check_connector(ring: Option<&KeyRing>, connector: &Connector) -> Result<()> {
    if connector.auth().slot().is_some() || connector.auth().oauth().is_some() {
        require(ring)?;
    }
    Ok(())
}

/// The workspace and connector a slot belongs to, checked against the bound configuration:
/// the connector must take its credential from a slot of this kind.
pub async fn resolve(db: &Db, tenant: TenantId, workspace: &str, connector: &str, kind: SlotKind) -> Result<(Uuid, Connector)> {
    let bound = workspaces::bound(db, tenant, workspace).await?;
    let c = bound.document.connectors.get(connector).ok_or(Error::NotFound { what: "connector" })?.clone();
    match c.auth().slot() {
        Some(k) if k == kind => Ok((bound.workspace.id.0, c)),
        Some(k) => Err(Error::Conflict {
            code: "slot_mismatch",
            message: format!("connector `{connector}` takes a {} credential, not a {}", k.as_str(), kind.as_str()),
        }),
        None => Err(Error::Conflict {
            code: "slot_mismatch",
            message: format!("connector `{connector}` takes no credential slot (its auth is not `slot`)"),
        }),
    }
}

/// Checks submitted fields: names, sizes, and every field the connector's headers need.
pub fn check_fields(connector: &Connector, fields: &BTreeMap<String, String>) -> Result<()> {
    let mut issues = Vec::new();
    let mut bad = |field: String, message: &str| issues.push(crate::error::FieldIssue { field, message: message.into() });
    if fields.is_empty() || fields.len() > MAX_FIELDS {
        bad("fields".into(), "from 1 to 16 fields");
    }
    for (name, value) in fields {
        if !workspaces::config::valid_field_name(name) {
            bad(format!("fields.{name}"), "a field name is 1 to 64 characters of A-Z, a-z, 0-9 and '_'");
        } else if value.is_empty() || value.len() > MAX_VALUE_BYTES || value.chars().any(char::is_control) {
            bad(format!("fields.{name}"), "a value is 1 to 4096 bytes without control characters");
        }
    }
    for needed in connector.auth().fields_needed() {
        if !fields.contains_key(&needed) {
            bad(format!("fields.{needed}"), "the connector's headers need this field");
        }
    }
    if issues.is_empty() { Ok(()) } else { Err(Error::InvalidConfig { issues }) }
}

/// Sets or replaces a slot's credential (sealed under the active key), with its admin-log row
/// in the same transaction. The change bumps the tenant's epoch, so every replica uses the
/// new value from its next call.
pub async fn set(db: &Db, ring: &KeyRing, audit: &Audit, slot: Slot<'_>, kind: SlotKind, fields: Fields) -> Result<Metadata> {
    let plaintext = Zeroizing::new(serde_json::to_vec(&fields.0).map_err(anyhow::Error::from)?);
    let envelope = ring.seal(&slot.aad(), &plaintext);
    let meta = serde_json::to_value(field_meta(&fields.0)).map_err(anyhow::Error::from)?;
    let (envelope, meta) = (&envelope, &meta);
    let row = db
        .serializable(Scope::Tenant(slot.tenant), move |conn, _| {
            Box::pin(async move {
                let (row, replaced) = store::upsert(&mut *conn, &slot, ring.active(), envelope, meta, &audit.actor)
                    .await
                    .map_err(|e| e.on_constraint("credentials_member_fkey", || Error::NotFound { what: "member" }))?;
                let names: Vec<&str> = meta.as_array().into_iter().flatten().filter_map(|f| f["name"].as_str()).collect();
                let entry = Entry {
                    tenant: Some(slot.tenant),
                    audit,
                    action: if replaced { "credential.replace" } else { "credential.set" },
                    target: format!("connector:{}/credential:{}", slot.connector, slot.owner.as_text()),
                    before: replaced.then(|| json!({ "version": row.version - 1 })),
                    after: Some(
                        json!({ "workspace_id": slot.workspace, "fields": names, "version": row.version, "key_id": row.key_id }),
                    ),
                };
                admin_log::record(conn, entry).await?;
                Ok(row)
            })
        })
        .await?;
    Ok(metadata(slot.connector, kind, slot.owner, Some(&row)))
}

/// Removes a slot's credential; `not_found` when there was none.
pub async fn remove(db: &Db, audit: &Audit, slot: Slot<'_>) -> Result<()> {
    db.serializable(Scope::Tenant(slot.tenant), move |conn, _| {
        Box::pin(async move {
            let version = store::delete(&mut *conn, slot.tenant, slot.workspace, slot.connector, slot.owner)
                .await?
                .ok_or(Error::NotFound { what: "credential" })?;
            let entry = Entry {
                tenant: Some(slot.tenant),
                audit,
                action: "credential.remove",
                target: format!("connector:{}/credential:{}", slot.connector, slot.owner.as_text()),
                before: Some(json!({ "workspace_id": slot.workspace, "version": version })),
                after: None,
            };
            admin_log::record(conn, entry).await
        })
    })
    .await
}

/// The slot's metadata (state `missing` when unset).
pub async fn show(db: &Db, slot: Slot<'_>, kind: SlotKind) -> Result<Metadata> {
    let (row, _) = load(db, slot).await?;
    Ok(metadata(slot.connector, kind, slot.owner, row.as_ref()))
}

/// The slot's sealed row and the epoch that labels it.
#[tracing::instrument(name = "vault::load", skip_all, fields(tenant = %slot.tenant, workspace = %slot.workspace, connector = slot.connector))]
pub async fn load(db: &Db, slot: Slot<'_>) -> Result<(Option<Stored>, i64)> {
    db.single_decision(Scope::Tenant(slot.tenant), move |conn, _| {
        Box::pin(store::get(conn, slot.tenant, slot.workspace, slot.connector, slot.owner))
    })
    .await
}

/// Opens a sealed row for its slot.
#[tracing::instrument(name = "vault::unseal", skip_all, fields(tenant = %slot.tenant, workspace = %slot.workspace, connector = slot.connector, slot = %slot.owner.as_text()))]
pub fn open(ring: &KeyRing, slot: Slot<'_>, row: &Stored) -> Result<Fields, Unreadable> {
    let plaintext = ring.open(&slot.aad(), &row.envelope)?;
    serde_json::from_slice(&plaintext).map(Fields).map_err(|_| Unreadable)
}

/// What `vault rotate` did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rotation {
    pub resealed: u64,
    pub already_current: u64,
    pub unreadable: u64,
}

/// Re-seals every envelope under the active key, `batch` rows per transaction, each batch
/// admin-logged. Resumable: a rerun finds only what is still under an older key. Rows that do
/// not open (tampered, or under a key no longer in the ring) are left as they are and counted.
pub async fn rotate(db: &Db, ring: &KeyRing, batch: i64) -> Result<Rotation> {
    const SCOPE: Scope = Scope::Platform { reason: "vault rotation" };
    let active = ring.active();
    let (kids, current) = db.single_decision(SCOPE, |conn, _| Box::pin(store::key_usage(conn, active))).await?;
    let mut totals = Rotation { already_current: current as u64, ..Default::default() };
    let audit = Audit::cli();
    for kid in &kids {
        let mut cursor: Option<store::Sealed> = None;
        loop {
            let rows = db.single_decision(SCOPE, |conn, _| Box::pin(store::batch(conn, kid, cursor.as_ref(), batch))).await?;
            let Some(last) = rows.last() else { break };
            let last = store::Sealed {
                tenant: last.tenant,
                workspace: last.workspace,
                connector: last.connector.clone(),
                owner: last.owner.clone(),
                envelope: String::new(),
            };
            let (rows, audit) = (&rows, &audit);
            let done = db
                .single_decision(SCOPE, move |conn, _| {
                    Box::pin(async move {
                        let mut n = Rotation::default();
                        for row in rows {
                            let Some(owner) = parse_owner(&row.owner) else {
                                n.unreadable += 1;
                                continue;
                            };
                            // A row holds a slot's fields or, for an OAuth connector, its grant's tokens.
                            let opened = [PURPOSE_CONNECTOR, super::PURPOSE_OAUTH_GRANT].into_iter().find_map(|purpose| {
                                let aad = Aad {
                                    tenant: row.tenant,
                                    workspace: row.workspace,
                                    connector: &row.connector,
                                    owner,
                                    purpose,
                                };
                                ring.open(&aad, &row.envelope).ok().map(|p| (aad, p))
                            });
                            match opened.ok_or(Unreadable) {
                                Ok((aad, plaintext)) => {
                                    let sealed = ring.seal(&aad, &plaintext);
                                    if store::reseal(&mut *conn, row, active, &sealed).await? {
                                        n.resealed += 1;
                                    } else {
                                        n.already_current += 1;
                                    }
                                }
                                Err(Unreadable) => n.unreadable += 1,
                            }
                        }
                        let entry = Entry {
                            tenant: None,
                            audit,
                            action: "vault.rotate_batch",
                            target: format!("vault:{kid}"),
                            before: Some(json!({ "key_id": kid })),
                            after: Some(json!({ "key_id": active, "resealed": n.resealed, "unreadable": n.unreadable })),
                        };
                        admin_log::record(conn, entry).await?;
                        Ok(n)
                    })
                })
                .await?;
            totals.resealed += done.resealed;
            totals.already_current += done.already_current;
            totals.unreadable += done.unreadable;
            cursor = Some(last);
        }
    }
    Ok(totals)
}

/// `shared`, `member:<uuid>` or `oauth_client`.
pub fn parse_owner(text: &str) -> Option<Owner> {
    match text {
        "shared" => Some(Owner::Shared),
        "oauth_client" => Some(Owner::OauthClient),
        _ => text.strip_prefix("member:").and_then(|id| id.parse().ok()).map(Owner::Member),
    }
}

/// What other nouns may run inside their own transaction (OAuth's token exchange writes the
/// slot it fills); the store itself is private.
pub mod tx {
    pub use crate::vault::store::{delete, upsert};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_shows_only_the_last_four_of_long_values() {
        let fields =
            BTreeMap::from([("short".to_owned(), "abcdefghijk".to_owned()), ("token".to_owned(), "0123456789ab".to_owned())]);
        let meta = field_meta(&fields);
        assert_eq!(meta[0].last4, None, "11 characters show nothing");
        assert_eq!(meta[1].last4.as_deref(), Some("89ab"));
        assert_eq!(parse_owner("shared"), Some(Owner::Shared));
        assert_eq!(parse_owner(&Owner::Member(Uuid::nil()).as_text()), Some(Owner::Member(Uuid::nil())));
        assert_eq!(parse_owner("member:x"), None);
        assert_eq!(parse_owner(&Owner::OauthClient.as_text()), Some(Owner::OauthClient));
        let fields = Fields(fields.clone());
        assert!(!format!("{fields:?}").contains("0123"));
    }
}
