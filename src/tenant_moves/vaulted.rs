//! The vault's sealed columns on a move: opened with the source deployment's keys for the
//! export (each with the associated data its row binds it to), carried as plaintext inside the
//! file's own encryption, and sealed again with the target's keys on import.

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;
use zeroize::Zeroizing;

use super::{Table, text};
use crate::{
    error::{Error, Result},
    ids::TenantId,
    vault::{Aad, KeyRing, PURPOSE_CONNECTOR, PURPOSE_OAUTH_GRANT, slots::parse_owner},
};

/// A sealed column's plaintext as it travels inside the file, and what it was sealed for.
#[derive(Serialize, Deserialize)]
pub(super) struct Vaulted {
    pub(super) purpose: String,
    pub(super) plaintext: String,
}

impl Drop for Vaulted {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.plaintext.zeroize();
    }
}

pub(super) fn uuid_of(row: &Map<String, Value>, column: &str) -> Option<Uuid> {
    text(row, column).and_then(|s| s.parse().ok())
}

/// The associated data a sealed column may have been sealed for, most likely first.
fn bindings<'r>(tenant: TenantId, table: &str, row: &'r Map<String, Value>) -> Vec<Aad<'r>> {
    match table {
        "credentials" => {
            let (Some(workspace), Some(connector), Some(owner)) =
                (uuid_of(row, "workspace_id"), text(row, "connector_id"), text(row, "owner").and_then(parse_owner))
            else {
                return Vec::new();
            };
            [PURPOSE_CONNECTOR, PURPOSE_OAUTH_GRANT]
                .into_iter()
                .map(|purpose| Aad { tenant: tenant.0, workspace, connector, owner, purpose })
                .collect()
        }
        "subject_keys" => text(row, "subject").map(|s| crate::snapshots::subject_key_aad(tenant, s)).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn unreadable_at(table: &str) -> Error {
    Error::Conflict {
        code: "credential_unreadable",
        message: format!("a sealed value in {table} does not open with this deployment's vault keys; nothing was exported"),
    }
}

/// Opens the row's sealed columns with the source ring: (column, purpose, plaintext).
pub(super) fn open_sealed(
    ring: &KeyRing,
    tenant: TenantId,
    table: &Table,
    row: &mut Map<String, Value>,
) -> Result<BTreeMap<String, Vaulted>> {
    let mut out = BTreeMap::new();
    for column in table.sealed {
        let Some(envelope) = text(row, column).map(str::to_owned) else { continue };
        let opened = bindings(tenant, table.name, row)
            .into_iter()
            .find_map(|aad| ring.open(&aad, &envelope).ok().map(|p| (aad.purpose.to_owned(), p)));
        let (purpose, plaintext) = opened.ok_or_else(|| unreadable_at(table.name))?;
        out.insert((*column).to_owned(), Vaulted { purpose, plaintext: STANDARD.encode(&*plaintext) });
        row.insert((*column).to_owned(), Value::Null);
    }
    Ok(out)
}

/// Seals the carried plaintext under the destination's ring, for the same binding.
pub(super) fn reseal(
    ring: &KeyRing,
    tenant: TenantId,
    table: &Table,
    row: &mut Map<String, Value>,
    vault: &BTreeMap<String, Vaulted>,
) -> Result<()> {
    let invalid = || Error::invalid("export_invalid", Some("from"), format!("a sealed value of {} is malformed", table.name));
    for (column, carried) in vault {
        if !table.sealed.contains(&column.as_str()) {
            return Err(invalid());
        }
        let plaintext = Zeroizing::new(STANDARD.decode(&carried.plaintext).map_err(|_| invalid())?);
        let sealed = {
            let aad = bindings(tenant, table.name, row).into_iter().find(|a| a.purpose == carried.purpose).ok_or_else(invalid)?;
            ring.seal(&aad, &plaintext)
        };
        row.insert(column.clone(), Value::String(sealed));
        if row.contains_key("key_id") {
            row.insert("key_id".into(), Value::String(ring.active().to_owned()));
        }
    }
    Ok(())
}
