//! The credential a call sends: the connector's slot (shared, or the caller's personal one)
//! opened by the vault and rendered into its header templates. A replica keeps the *sealed*
//! row, labelled with the tenant's epoch like the bound configuration, so a replaced
//! credential is read again on the very next call on every replica; plaintext lives only for
//! the call (and inside the downstream session it opened).

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    AppState,
    ids::TenantId,
    vault::{
        Owner,
        slots::{self, Slot},
    },
    workspaces::{Connector, config::SlotKind},
};

/// The cache key of a slot: tenant, workspace, connector, owner.
pub type SlotKey = (TenantId, Uuid, String, Owner);

/// Headers to send and the tag that names this credential version in session keys. Never
/// printed.
#[derive(Clone)]
pub struct Credential {
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `<owner>@<digest of version and update time>`: a replaced credential opens a new
    /// downstream session. Holds no secret.
    pub tag: String,
    /// A DPoP-bound OAuth grant's binding: every request to the downstream then carries a
    /// fresh proof of the grant's key (`DPoP` header).
    pub dpop: Option<Arc<crate::oauth::dpop::Binding>>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("tag", &self.tag).finish_non_exhaustive()
    }
}

/// Why a connector's credential cannot be used.
#[derive(Debug, Clone)]
pub struct Problem {
    /// `auth_required`, `credential_unreadable` or `vault_disabled`.
    pub code: &'static str,
    pub message: String,
    /// `missing`, `incomplete`, `unreadable`, `vault_disabled`, `no_member`, `refused`.
    pub state: &'static str,
}

impl Problem {
    pub fn into_error(self) -> crate::error::Error {
        match self.code {
            "unavailable" => {
                crate::error::Error::Unavailable { code: "unavailable", message: self.message, retry_after_ms: Some(500) }
            }
            code => crate::error::Error::Conflict { code, message: self.message },
        }
    }
}

/// How to set a slot, for messages.
pub fn how_to_set(tenant: &str, workspace: &str, connector: &str, kind: SlotKind) -> String {
    match kind {
        SlotKind::Shared => format!(
            "a person with credential_administration sets it with PUT /api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{connector}/credentials/shared \
             (body {{\"fields\": {{…}}}}) or `gatehouse credential set --tenant {tenant} --workspace {workspace} --connector {connector} --field NAME`"
        ),
        SlotKind::Personal => format!(
            "the member sets their own with PUT /api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{connector}/credentials/personal \
             (body {{\"fields\": {{…}}}})"
        ),
    }
}

/// Where the call comes from.
pub struct Caller<'a> {
    pub tenant: TenantId,
    pub tenant_slug: &'a str,
    pub workspace: Uuid,
    pub workspace_slug: &'a str,
    pub member_id: Option<Uuid>,
    /// The tenant's epoch this request read (the cache is used only while it matches);
    /// `None` always reads the database.
    pub epoch: Option<i64>,
}

/// The connector's credential for this caller: `Ok(None)` when it takes none.
#[tracing::instrument(name = "gateway::credential", skip_all, fields(tenant = %at.tenant, workspace = at.workspace_slug, connector = id, slot))]
pub async fn resolve(state: &AppState, at: &Caller<'_>, id: &str, connector: &Connector) -> Result<Option<Credential>, Problem> {
    if let Some(o) = connector.auth().oauth() {
        // Boxed, as is the slot's load: a call's future need not carry them when they are not taken.
        return Box::pin(crate::oauth::resolve(state, at, id, connector, o)).await;
    }
    let Some(kind) = connector.auth().slot() else { return Ok(None) };
    tracing::Span::current().record("slot", kind.as_str());
    let how = || how_to_set(at.tenant_slug, at.workspace_slug, id, kind);
    let Some(ring) = state.config.vault_keys.as_ref() else {
        return Err(Problem {
            code: "vault_disabled",
            state: "vault_disabled",
            message: format!(
                "connector `{id}` takes a credential slot, but this deployment's vault is off (GATEHOUSE_VAULT_KEYS)"
            ),
        });
    };
    let owner = match kind {
        SlotKind::Shared => Owner::Shared,
        SlotKind::Personal => match at.member_id {
            Some(m) => Owner::Member(m),
            None => {
                return Err(Problem {
                    code: "auth_required",
                    state: "no_member",
                    message: format!("connector `{id}` uses each member's own credential; this caller is no member"),
                });
            }
        },
    };
    let slot = Slot { tenant: at.tenant, workspace: at.workspace, connector: id, owner };
    let key: SlotKey = (at.tenant, at.workspace, id.to_owned(), owner);
    let row = match state.credentials.current(&key, at.epoch) {
        Some(row) => row,
        None => {
            let (row, epoch) = Box::pin(slots::load(&state.db, slot)).await.map_err(|e| {
                tracing::warn!(error = %e, "could not read a credential slot");
                Problem {
                    code: "unavailable",
                    state: "unavailable",
                    message: "the credential could not be read; retry shortly".into(),
                }
            })?;
            let row = Arc::new(row);
            state.credentials.put(key, row.clone(), epoch);
            row
        }
    };
    let Some(row) = row.as_ref() else {
        let whose = if kind == SlotKind::Shared { "The shared credential" } else { "Your personal credential" };
        return Err(Problem {
            code: "auth_required",
            state: "missing",
            message: format!("{whose} of connector `{id}` is not set: {}", how()),
        });
    };
    let fields = slots::open(ring, slot, row).map_err(|_| Problem {
        code: "credential_unreadable",
        state: "unreadable",
        message: format!(
            "the credential of connector `{id}` cannot be opened with this deployment's vault keys (a removed key, or a damaged row); set it again: {}",
            how()
        ),
    })?;
    let rendered = connector.auth().render(&fields.0).map_err(|missing| Problem {
        code: "auth_required",
        state: "incomplete",
        message: format!(
            "the credential of connector `{id}` has no field `{missing}`, which its headers need; set it again: {}",
            how()
        ),
    })?;
    let mut headers = Vec::with_capacity(rendered.len());
    for (name, value) in rendered {
        let (Ok(name), Ok(mut value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value)) else {
            return Err(Problem {
                code: "auth_required",
                state: "incomplete",
                message: format!(
                    "a value of connector `{id}`'s credential cannot be sent in an HTTP header; set it again: {}",
                    how()
                ),
            });
        };
        value.set_sensitive(true);
        headers.push((name, value));
    }
    let digest = Sha256::digest(format!("{}|{}", row.version, row.updated_at.timestamp_micros()));
    Ok(Some(Credential { headers, tag: format!("{}@{}", owner.as_text(), hex::encode(&digest[..8])), dpop: None }))
}

/// A downstream refused the credential of a call (HTTP `status`, 401 or 403): the problem to
/// answer, always `auth_required` with how to repair it. An OAuth grant is marked as needing
/// a new authorization ([`crate::oauth::refused`]); a slot's credential must be set again; a
/// connector without credentials must be configured with some. Each is an ops failure.
pub async fn refused(
    state: &AppState,
    at: &Caller<'_>,
    id: &str,
    connector: &Connector,
    credential: Option<&Credential>,
    status: u16,
    challenge: Option<&str>,
) -> Problem {
    if let Some(o) = connector.auth().oauth() {
        return crate::oauth::refused(state, at, id, o, credential.map(|c| c.tag.as_str()), status, challenge).await;
    }
    let message = match connector.auth().slot() {
        Some(kind) => format!(
            "the connector's server refused its credential (HTTP {status}); set it again: {}",
            how_to_set(at.tenant_slug, at.workspace_slug, id, kind)
        ),
        None => format!(
            "the connector's server asks for authorization (HTTP {status}), but connector `{id}` is configured without credentials: an operator must configure its auth"
        ),
    };
    crate::ops::record(
        &state.ops,
        crate::ops::Failure {
            operation: "downstream.auth",
            stage: connector.kind().to_owned(),
            tenant: Some(at.tenant.0),
            workspace: Some(at.workspace),
            status: crate::ops::Status::Failed,
            code: "credential_refused".into(),
            message: format!("connector {id}: the server answered HTTP {status} to its credential"),
            reference: None,
        },
    );
    Problem { code: "auth_required", state: "refused", message }
}
