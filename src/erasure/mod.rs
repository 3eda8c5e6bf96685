//! Subject erasure (issue 7 §5): redact one subject's data in every copy of a workspace the
//! copy ledger names, then claim the erasure by bumping the workspace's erasure epoch with one
//! conditional update, then destroy the subject's keys, all in one serializable transaction.
//! A lost claim (a copy pending, or anything the redaction pass read having moved) answers
//! 412 `erasure_retry_later` and the whole transaction, redaction included, rolls back.
//!
//! What "the subject" matches (see `docs/decisions.md`, "Subject erasure"):
//! - a member, named by its id or its email: its activity rows (actor ids of its access tokens
//!   and MCP authorization grants, and its own id), its personal credential slots and OAuth
//!   grants, its MCP authorization grants, its names in the tenant's ops-failure text, and its
//!   subject keys (`member:<id>`, or any of its names);
//! - anything else is an external subject id, matched exactly as given: activity actor ids,
//!   ops-failure text and the subject key of that name.

pub mod cli;
pub mod http;
mod store;

use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

/// Shorter names are not rewritten out of free text (they would match unrelated words).
const MIN_TEXT_NEEDLE: usize = 6;

/// Who is erased, resolved inside the erasing transaction.
struct Subject {
    /// `member:<id>` or `external:<id>`: what the digest is taken of.
    canonical: String,
    member: Option<Uuid>,
    /// Every name the subject goes by (keys and activity actors).
    names: Vec<String>,
    /// Activity actor ids that are the subject's.
    actors: Vec<String>,
}

/// What one erasure did, counted per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Counts {
    /// Workspace copies redacted (the workspace itself and its forks).
    pub workspaces: u64,
    /// Snapshot copies the ledger names (sealed per subject; unreadable once the key is gone).
    pub snapshots: u64,
    pub activity: u64,
    pub credentials: u64,
    pub oauth_grants: u64,
    pub mcp_grants: u64,
    pub ops_failures: u64,
    pub subject_keys: u64,
    /// Approvals whose caller or approver was the subject.
    pub approvals: u64,
}

impl Counts {
    /// Whether anything of the subject was found (the copies reached do not count).
    fn found(&self) -> bool {
        self.activity
            + self.credentials
            + self.oauth_grants
            + self.mcp_grants
            + self.ops_failures
            + self.subject_keys
            + self.approvals
            > 0
    }
}

/// The answer of an erasure. `receipt` is `None` when nothing of the subject was left: then the
/// epoch did not move (there was nothing a stale move could carry back).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Outcome {
    pub receipt: Option<Uuid>,
    pub workspace: String,
    pub epoch: i64,
    pub subject_digest: String,
    pub counts: Counts,
    pub erased_at: Option<chrono::DateTime<chrono::Utc>>,
}

fn retry_later(why: &str) -> Error {
    Error::Precondition { code: "erasure_retry_later", message: format!("{why}; nothing was erased, retry later") }
}

/// The digest that stands for the subject in receipts and logs (never the subject itself).
pub fn subject_digest(tenant: TenantId, canonical: &str) -> String {
    hex::encode(Sha256::digest(format!("{}\n{canonical}", tenant.0).as_bytes()))
}

fn validate(raw: &str) -> Result<&str> {
    let s = raw.trim();
    if s.chars().count() < 3 || s.len() > 512 || s.chars().any(char::is_control) {
        return Err(Error::invalid(
            "invalid_subject",
            Some("subject"),
            "a subject is 3 to 512 characters, no control characters",
        ));
    }
    Ok(s)
}

async fn resolve(conn: &mut sqlx::PgConnection, tenant: TenantId, raw: &str) -> Result<Subject> {
    match store::member(&mut *conn, tenant, raw).await? {
        Some((id, issuer, subject, email)) => {
            let mut names = vec![format!("member:{id}"), id.to_string(), subject.clone()];
            names.extend(email);
            let mut actors = store::member_actor_ids(&mut *conn, tenant, id, &issuer, &subject).await?;
            actors.extend(names.iter().cloned());
            Ok(Subject { canonical: format!("member:{id}"), member: Some(id), names, actors })
        }
        None => Ok(Subject {
            canonical: format!("external:{raw}"),
            member: None,
            names: vec![raw.to_owned()],
            actors: vec![raw.to_owned()],
        }),
    }
}

/// Erases `subject` across the workspace `slug` and every copy of it (see the module doc).
pub async fn erase(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, subject: &str) -> Result<Outcome> {
    let raw = validate(subject)?;
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let read = store::read(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            if read.pending > 0 {
                return Err(retry_later("a copy of this workspace is being made"));
            }
            let subject = resolve(&mut *conn, tenant, raw).await?;
            let digest = subject_digest(tenant, &subject.canonical);
            let marker = format!("erased:{}", &digest[..12]);
            let reach = store::reach(&mut *conn, tenant, read.id).await?;
            let mut counts = Counts {
                workspaces: reach.len() as u64,
                snapshots: store::snapshots(&mut *conn, tenant, &reach).await? as u64,
                activity: store::redact_activity(&mut *conn, tenant, &reach, &subject.actors, &marker).await?,
                approvals: store::redact_approvals(&mut *conn, tenant, &reach, &subject.actors, subject.member, &marker).await?,
                ..Counts::default()
            };
            if let Some(member) = subject.member {
                counts.credentials = store::delete_credentials(&mut *conn, tenant, &reach, member).await?;
                counts.oauth_grants = store::delete_oauth_grants(&mut *conn, tenant, &reach, member).await?;
                counts.mcp_grants = store::delete_mcp_grants(&mut *conn, tenant, &reach, member).await?;
            }
            let needles: Vec<String> = subject.actors.iter().filter(|n| n.chars().count() >= MIN_TEXT_NEEDLE).cloned().collect();
            counts.ops_failures = store::redact_ops_failures(&mut *conn, tenant, &needles, &marker).await?;
            counts.subject_keys = store::destroy_keys(&mut *conn, tenant, &subject.names).await?;
            if !counts.found() {
                // Nothing of the subject is left (an erasure already ran): no epoch to bump.
                return Ok(Outcome {
                    receipt: None,
                    workspace: slug.to_owned(),
                    epoch: read.epoch,
                    subject_digest: digest,
                    counts,
                    erased_at: None,
                });
            }
            let epoch = store::claim(&mut *conn, tenant, &read)
                .await?
                .ok_or_else(|| retry_later("the workspace or its copies changed during the erasure"))?;
            let id = Uuid::now_v7();
            let counts_json = serde_json::to_value(&counts).map_err(anyhow::Error::from)?;
            let receipt = store::Receipt {
                id,
                workspace: read.id,
                subject_digest: &digest,
                epoch,
                counts: &counts_json,
                erased_by: &audit.actor,
            };
            let erased_at = store::insert_receipt(&mut *conn, tenant, &receipt).await?;
            admin_log::record(
                conn,
                Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "workspace.erase",
                    target: format!("workspace:{slug}"),
                    before: Some(json!({ "erasure_epoch": read.epoch })),
                    after: Some(
                        json!({ "erasure_epoch": epoch, "receipt": id, "subject_digest": digest, "counts": counts_json }),
                    ),
                },
            )
            .await?;
            Ok(Outcome {
                receipt: Some(id),
                workspace: slug.to_owned(),
                epoch,
                subject_digest: digest,
                counts,
                erased_at: Some(erased_at),
            })
        })
    })
    .await
}
