//! Snapshot export and restore (issue 7 §4): a snapshot is a file in the snapshot directory
//! (`GATEHOUSE_SNAPSHOT_DIR`, shared by every replica) holding a workspace's configuration and
//! state. Both are moves of the copy ledger: export (source `workspace:<id>`, destination
//! `snapshot:<file>`) writes the file under a temporary name and renames it inside the confirm
//! transaction; restore (source `snapshot:<file>`, destination `workspace:<new id>`) builds a
//! new workspace in `provisioning` and activates it with the confirm.
//!
//! What a snapshot holds: the bound configuration document, the stored catalogs, the
//! workspace-wide credentials (sealed by the vault key ring for the snapshot), and one part per
//! subject, sealed under that subject's own key from `subject_keys`: the member's personal
//! credentials (`member:<id>`) and the activity rows of each actor (`member:<id>` when a
//! token or MCP grant belongs to a member, else the actor id). An erasure destroys the
//! subject's key, so its parts of every snapshot become unreadable, wherever the files went.
//! OAuth grants are never exported (single-use refresh tokens; a person connects again).

pub mod cli;
pub mod http;
mod store;

use std::{collections::BTreeMap, path::PathBuf};

use base64::{Engine, engine::general_purpose::STANDARD};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::{
    admin_log::{self, Audit, Entry},
    config::Config,
    copies::{self, Kind, Move, Role, SourceOutcome},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    ids::WorkspaceId,
    tenants::validate_slug,
    vault::{
        Aad, KeyRing, Owner, PURPOSE_CONNECTOR,
        slots::{Slot, parse_owner},
    },
    workspaces::{self, Document},
};

pub const FORMAT: &str = "gatehouse-snapshot-v1";
/// Associated-data purposes of what a snapshot seals.
const PURPOSE_SNAPSHOT: &str = "snapshot_credential";
const PURPOSE_SUBJECT_KEY: &str = "subject_key";
const PURPOSE_SUBJECT_PART: &str = "snapshot_subject";

/// A snapshot file.
#[derive(Serialize, Deserialize)]
pub struct File {
    pub format: String,
    pub tenant_id: Uuid,
    pub workspace_id: Uuid,
    pub workspace: String,
    pub move_id: Uuid,
    pub epoch: i64,
    pub document: Value,
    pub catalogs: Vec<Value>,
    pub credentials: Vec<Sealed>,
    /// The subject's digest ([`subject_digest`]: never the subject itself, which an erasure
    /// must not leave behind in the clear) → its part, sealed under the subject's key.
    pub subjects: BTreeMap<String, String>,
}

/// A workspace-wide credential: metadata in the clear, fields sealed by the vault.
#[derive(Serialize, Deserialize)]
pub struct Sealed {
    pub connector: String,
    pub owner: String,
    pub fields: Value,
    pub sealed: String,
}

/// One subject's part (sealed as a whole).
#[derive(Serialize, Deserialize, Default)]
struct Part {
    /// (connector, owner, field metadata, the fields' JSON).
    credentials: Vec<(String, String, Value, String)>,
    activity: Vec<Value>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Exported {
    pub file: String,
    pub move_id: Uuid,
    pub subjects: usize,
    /// Subjects whose key is destroyed (erased): nothing of theirs was written.
    pub subjects_erased: usize,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Restored {
    pub workspace: String,
    pub workspace_id: Uuid,
    pub move_id: Uuid,
    pub subjects_restored: usize,
    /// Subjects whose key is destroyed: their parts cannot be opened and are not restored.
    pub subjects_unreadable: usize,
}

/// What a subject's data key is sealed for under the vault's ring (a tenant move opens and
/// seals it anew, so snapshots of the subject open at the destination too).
pub fn subject_key_aad(tenant: TenantId, subject: &str) -> Aad<'_> {
    key_aad(tenant, subject)
}

fn key_aad(tenant: TenantId, subject: &str) -> Aad<'_> {
    Aad { tenant: tenant.0, workspace: Uuid::nil(), connector: subject, owner: Owner::Shared, purpose: PURPOSE_SUBJECT_KEY }
}

fn part_aad(tenant: TenantId, workspace: Uuid, subject: &str) -> Aad<'_> {
    Aad { tenant: tenant.0, workspace, connector: subject, owner: Owner::Shared, purpose: PURPOSE_SUBJECT_PART }
}

/// A one-key ring over a subject's data key (the vault's envelope format, kid `subject`).
fn subject_ring(key: &[u8]) -> Result<KeyRing> {
    let spec = Zeroizing::new(format!("subject:{}", STANDARD.encode(key)));
    KeyRing::parse(&spec).map_err(|e| Error::Internal(anyhow::anyhow!("subject key: {e}")))
}

/// The subject's live key, created on first use; `None` when it was destroyed (erased).
async fn subject_key(conn: &mut sqlx::PgConnection, ring: &KeyRing, tenant: TenantId, subject: &str) -> Result<Option<KeyRing>> {
    match store::subject_key(&mut *conn, tenant, subject).await? {
        Some(None) => Ok(None),
        Some(Some(envelope)) => {
            let key = ring.open(&key_aad(tenant, subject), &envelope).map_err(|_| Error::Conflict {
                code: "credential_unreadable",
                message: "a subject key cannot be opened with this deployment's vault keys".into(),
            })?;
            subject_ring(&key).map(Some)
        }
        None => {
            let mut key = Zeroizing::new([0u8; 32]);
            rand::rng().fill_bytes(key.as_mut());
            let envelope = ring.seal(&key_aad(tenant, subject), key.as_ref());
            store::insert_subject_key(&mut *conn, tenant, subject, ring.active(), &envelope).await?;
            subject_ring(key.as_ref()).map(Some)
        }
    }
}

/// What names a subject in a snapshot file: SHA-256 of the tenant and the subject.
pub fn subject_digest(tenant: TenantId, subject: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(format!("{}\n{subject}", tenant.0).as_bytes()))
}

fn valid_file(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

fn paths(config: &Config, file: &str) -> (PathBuf, PathBuf) {
    let dir = &config.copies.snapshot_dir;
    (dir.join(file), dir.join(format!(".{file}.tmp")))
}

/// Exports the workspace `slug` to a new snapshot file; its name.
pub async fn export(db: &Db, config: &Config, tenant: TenantId, audit: &Audit, slug: &str) -> Result<Exported> {
    let ring = crate::vault::slots::require(config.vault_keys.as_ref())?;
    let ws = workspaces::bound(db, tenant, slug).await?.workspace;
    let move_id = Uuid::now_v7();
    let file = format!("{}-{}.snap", ws.id.0.simple(), move_id.simple());
    let mv = Move {
        id: move_id,
        kind: Kind::SnapshotExport,
        workspace: ws.id.0,
        rows: vec![(copies::workspace_ref(ws.id.0), Role::Source), (copies::snapshot_ref(&file), Role::Destination)],
    };
    let epoch = copies::record(db, tenant, audit, config.copies.lease_ms, &mv).await?.epoch()?;
    copies::fault(config, "snapshot.after_record");
    let outcome = async {
        let (body, subjects, erased) = read(Step { db, ring, tenant, audit, mv: &mv }, slug, &file, epoch).await?;
        let (path, temp) = paths(config, &file);
        std::fs::create_dir_all(&config.copies.snapshot_dir)
            .and_then(|()| std::fs::write(&temp, &body))
            .and_then(|()| std::fs::File::open(&temp)?.sync_all())
            .map_err(|e| anyhow::anyhow!("cannot write the snapshot file: {e}"))?;
        copies::fault(config, "snapshot.after_copy");
        let (path, temp, file) = (&path, &temp, &file);
        db.serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                copies::confirm(&mut *conn, tenant, audit, move_id, SourceOutcome::Retained).await?;
                // Renamed inside the confirm: if the commit fails, the ledger row stays pending
                // and the sweep removes the file. A retried attempt finds it renamed already.
                if temp.exists() || !path.exists() {
                    std::fs::rename(temp, path).map_err(|e| anyhow::anyhow!("cannot rename the snapshot file: {e}"))?;
                }
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "snapshot.export",
                    target: format!("workspace:{slug}"),
                    before: None,
                    after: Some(json!({ "file": file, "move_id": move_id, "subjects": subjects, "subjects_erased": erased })),
                };
                admin_log::record(conn, entry).await
            })
        })
        .await?;
        Ok(Exported { file: file.clone(), move_id, subjects, subjects_erased: erased })
    }
    .await;
    if outcome.is_err() {
        copies::sweep::abandon(db, config, tenant, move_id).await;
    }
    outcome
}

/// What both copy steps (an export's [`read`], a restore's [`write`]) work with: the tenant's
/// move, the database it holds its lease in, and the ring that opens and seals.
#[derive(Clone, Copy)]
struct Step<'a> {
    db: &'a Db,
    ring: &'a KeyRing,
    tenant: TenantId,
    audit: &'a Audit,
    mv: &'a Move,
}

/// The export's copy step: reads the state under the move's lease and seals it; (file body,
/// subjects written, subjects erased).
async fn read(step: Step<'_>, slug: &str, file: &str, epoch: i64) -> Result<(Vec<u8>, usize, usize)> {
    let Step { db, ring, tenant, audit, mv } = step;
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            copies::hold(&mut *conn, tenant, mv.id).await?;
            let bound = workspaces::tx::bound(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            let ws = mv.workspace;
            let catalogs = store::catalogs(&mut *conn, tenant, ws).await?;
            let mut shared = Vec::new();
            let mut parts: BTreeMap<String, Part> = BTreeMap::new();
            for (connector, owner_text, envelope, fields) in store::credentials(&mut *conn, tenant, ws).await? {
                let Some(owner) = parse_owner(&owner_text) else { continue };
                let aad = Aad { tenant: tenant.0, workspace: ws, connector: &connector, owner, purpose: PURPOSE_CONNECTOR };
                // OAuth grant tokens (another purpose) do not open here and are not exported.
                let Ok(plaintext) = ring.open(&aad, &envelope) else { continue };
                match owner.member_id() {
                    None => {
                        let aad = Aad { purpose: PURPOSE_SNAPSHOT, ..aad };
                        let sealed = ring.seal(&aad, &plaintext);
                        shared.push(Sealed { connector: connector.clone(), owner: owner_text, fields, sealed });
                    }
                    Some(member) => {
                        let text = String::from_utf8_lossy(&plaintext).into_owned();
                        parts.entry(format!("member:{member}")).or_default().credentials.push((connector.clone(), owner_text, fields, text));
                    }
                }
            }
            for (subject, row) in store::activity(&mut *conn, tenant, ws).await? {
                parts.entry(subject).or_default().activity.push(row);
            }
            let (mut subjects, mut erased) = (BTreeMap::new(), 0usize);
            for (subject, part) in &parts {
                let Some(key) = subject_key(&mut *conn, ring, tenant, subject).await? else {
                    erased += 1;
                    continue;
                };
                let plain = Zeroizing::new(serde_json::to_vec(part).map_err(anyhow::Error::from)?);
                subjects.insert(subject_digest(tenant, subject), key.seal(&part_aad(tenant, ws, subject), &plain));
            }
            let written = subjects.len();
            let body = File {
                format: FORMAT.into(),
                tenant_id: tenant.0,
                workspace_id: ws,
                workspace: slug.to_owned(),
                move_id: mv.id,
                epoch,
                document: serde_json::to_value(&bound.document).map_err(anyhow::Error::from)?,
                catalogs,
                credentials: shared,
                subjects,
            };
            let body = serde_json::to_vec(&body).map_err(anyhow::Error::from)?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "snapshot.copy",
                target: format!("workspace:{slug}"),
                before: None,
                after: Some(json!({ "file": file, "move_id": mv.id, "bytes": body.len(), "subjects": written, "subjects_erased": erased })),
            };
            admin_log::record(conn, entry).await?;
            Ok((body, written, erased))
        })
    })
    .await
}

/// Restores the snapshot `file` into a new workspace `slug`.
pub async fn restore(db: &Db, config: &Config, tenant: TenantId, audit: &Audit, file: &str, slug: &str) -> Result<Restored> {
    let ring = crate::vault::slots::require(config.vault_keys.as_ref())?;
    validate_slug(slug)?;
    if !valid_file(file) {
        return Err(Error::NotFound { what: "snapshot" });
    }
    let (path, _) = paths(config, file);
    let body = std::fs::read(&path).map_err(|_| Error::NotFound { what: "snapshot" })?;
    let (snap, document) = parse_file(tenant, &body)?;
    let id = Uuid::now_v7();
    let mv = Move {
        id: Uuid::now_v7(),
        kind: Kind::SnapshotRestore,
        workspace: snap.workspace_id,
        rows: vec![(copies::snapshot_ref(file), Role::Source), (copies::workspace_ref(id), Role::Destination)],
    };
    copies::record(db, tenant, audit, config.copies.lease_ms, &mv).await?.epoch()?;
    copies::fault(config, "restore.after_record");
    let outcome = async {
        let (restored, unreadable) = write(Step { db, ring, tenant, audit, mv: &mv }, &snap, &document, id, slug).await?;
        copies::fault(config, "restore.after_copy");
        let mv = &mv;
        db.serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                copies::confirm(&mut *conn, tenant, audit, mv.id, SourceOutcome::Retained).await?;
                if !store::activate(&mut *conn, tenant, id).await? {
                    return Err(Error::Precondition {
                        code: "copy_lease_lost",
                        message: "the restore was settled by the recovery sweep; restore again".into(),
                    });
                }
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "snapshot.restore",
                    target: format!("workspace:{slug}"),
                    before: None,
                    after: Some(json!({ "file": file, "move_id": mv.id, "subjects_restored": restored, "subjects_unreadable": unreadable })),
                };
                admin_log::record(conn, entry).await
            })
        })
        .await?;
        Ok(Restored { workspace: slug.to_owned(), workspace_id: id, move_id: mv.id, subjects_restored: restored, subjects_unreadable: unreadable })
    }
    .await;
    if outcome.is_err() {
        copies::sweep::abandon(db, config, tenant, mv.id).await;
    }
    outcome
}

/// A snapshot file's body as `tenant` restores it: the file and its configuration document.
/// Another tenant's snapshot, or another format, answers exactly like a missing one.
pub fn parse_file(tenant: TenantId, body: &[u8]) -> Result<(File, Document)> {
    let snap: File = serde_json::from_slice(body).map_err(|_| Error::NotFound { what: "snapshot" })?;
    if snap.format != FORMAT || snap.tenant_id != tenant.0 {
        return Err(Error::NotFound { what: "snapshot" });
    }
    let document: Document =
        serde_json::from_value(snap.document.clone()).map_err(|e| anyhow::anyhow!("snapshot configuration unreadable: {e}"))?;
    Ok((snap, document))
}

/// The restore's copy step: the new workspace `id` (`provisioning`) and everything still
/// readable.
async fn write(step: Step<'_>, snap: &File, document: &Document, id: Uuid, slug: &str) -> Result<(usize, usize)> {
    let Step { db, ring, tenant, audit, mv } = step;
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            copies::hold(&mut *conn, tenant, mv.id).await?;
            let name: String = format!("{} (restored)", snap.workspace).chars().take(200).collect();
            store::insert_provisioning(&mut *conn, tenant, id, slug, &name).await?;
            let digest = workspaces::digest(document)?;
            workspaces::tx::insert_version(&mut *conn, tenant, WorkspaceId(id), 1, document, &digest, &audit.actor).await?;
            for row in &snap.catalogs {
                store::restore_catalog(&mut *conn, tenant, id, row).await?;
            }
            let src = snap.workspace_id;
            for c in &snap.credentials {
                let Some(owner) = parse_owner(&c.owner) else { continue };
                let from = Aad { tenant: tenant.0, workspace: src, connector: &c.connector, owner, purpose: PURPOSE_SNAPSHOT };
                let plaintext = ring.open(&from, &c.sealed).map_err(|_| Error::Conflict {
                    code: "credential_unreadable",
                    message: "the snapshot's credentials cannot be opened with this deployment's vault keys".into(),
                })?;
                let to = Aad { workspace: id, purpose: PURPOSE_CONNECTOR, ..from };
                let sealed = ring.seal(&to, &plaintext);
                let slot = Slot { tenant, workspace: id, connector: &c.connector, owner };
                store::restore_credential(&mut *conn, &slot, ring.active(), &sealed, &c.fields, &audit.actor).await?;
            }
            let (mut restored, mut unreadable) = (0usize, 0usize);
            // The file names subjects by digest: find each one's live key by its digest.
            let live: BTreeMap<String, (String, String)> = store::live_subject_keys(&mut *conn, tenant)
                .await?
                .into_iter()
                .map(|(subject, envelope)| (subject_digest(tenant, &subject), (subject, envelope)))
                .collect();
            for (digest, sealed) in &snap.subjects {
                let Some((subject, envelope)) = live.get(digest) else {
                    unreadable += 1;
                    continue;
                };
                let key = ring.open(&key_aad(tenant, subject), envelope).ok();
                let part = key
                    .and_then(|k| subject_ring(&k).ok())
                    .and_then(|k| k.open(&part_aad(tenant, src, subject), sealed).ok())
                    .and_then(|p| serde_json::from_slice::<Part>(&p).ok());
                let Some(part) = part else {
                    unreadable += 1;
                    continue;
                };
                for (connector, owner_text, fields, text) in &part.credentials {
                    let Some(owner) = parse_owner(owner_text) else { continue };
                    let to = Aad { tenant: tenant.0, workspace: id, connector, owner, purpose: PURPOSE_CONNECTOR };
                    let sealed = ring.seal(&to, text.as_bytes());
                    store::restore_credential(
                        &mut *conn,
                        &Slot { tenant, workspace: id, connector, owner },
                        ring.active(),
                        &sealed,
                        fields,
                        &audit.actor,
                    )
                    .await?;
                }
                for row in &part.activity {
                    store::restore_activity(&mut *conn, tenant, id, row).await?;
                }
                restored += 1;
            }
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "snapshot.restore_copy",
                target: format!("workspace:{slug}"),
                before: None,
                after: Some(json!({ "move_id": mv.id, "from": snap.workspace, "subjects_restored": restored, "subjects_unreadable": unreadable })),
            };
            admin_log::record(conn, entry).await?;
            Ok((restored, unreadable))
        })
    })
    .await
}
