//! Connect links (the substrat seed's mailed consent links): an admin mints a link for one
//! workspace connector and an email address; the person who follows it authorizes the
//! connector's OAuth grant for the workspace without being a member. A link is `outstanding`
//! until one OAuth callback consumes it (`used`) or an admin revokes it. Every transition is
//! one conditional update and commits with its admin-log row; of racing consumers exactly one
//! wins. The link's secret is stored only as its SHA-256 and travels only in the mail: sent by
//! SMTP when `GATEHOUSE_SMTP_URL` is set, else (or when sending fails) left in the outbox for
//! the operator (`gatehouse outbox list`, the console's outbox page). The outbox keeps each
//! mail's body sealed with the vault's key ring, so the link is never at rest in plaintext.

pub mod cli;
pub mod http;
pub mod mail;
mod store;

use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    secrets,
    vault::{Aad, KeyRing, Owner},
    workspaces,
};

pub use store::{Link, Mail};

/// `gcl_` + 43 characters of base64url.
pub const PREFIX: &str = "gcl_";
pub const DEFAULT_TTL_DAYS: i64 = 7;
pub const MAX_TTL_DAYS: i64 = 30;

/// A freshly minted link: its metadata (the secret went to the mail, not here).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Minted {
    #[serde(flatten)]
    pub link: Link,
    /// The outbox message that carries it.
    pub mail_id: Uuid,
    /// Whether SMTP delivered it (else it waits in the outbox).
    pub delivered: bool,
}

/// The public URL of a link (only ever written into its mail).
pub fn url(public_url: &str, tenant_slug: &str, secret: &str) -> String {
    format!("{}/connect/{tenant_slug}/{secret}", public_url.trim_end_matches('/'))
}

/// What an outbox body is sealed for: its tenant and its own mail id (which stands where a
/// workspace would), so an envelope opens only in its own row.
fn mail_aad(tenant: TenantId, mail: Uuid) -> Aad<'static> {
    Aad { tenant: tenant.0, workspace: mail, connector: "", owner: Owner::Shared, purpose: PURPOSE_MAIL_BODY }
}

const PURPOSE_MAIL_BODY: &str = "mail_body";

/// What [`mint`] is asked for: the link's connector, workspace, addressee and lifetime, and
/// what its URL is made of.
#[derive(Clone, Copy, Debug)]
pub struct MintParams<'a> {
    /// The tenant's slug, for the URL and the mail.
    pub tenant_slug: &'a str,
    /// The deployment's public origin, for the URL.
    pub public_url: &'a str,
    pub workspace: &'a str,
    pub connector: &'a str,
    pub email: &'a str,
    /// None: [`DEFAULT_TTL_DAYS`].
    pub ttl_days: Option<i64>,
}

/// Mints a link for `connector` of `workspace` (which must take a shared OAuth grant) and
/// mails it to `email`; link, mail and admin-log row commit together. `ring` seals the mail's
/// body in the outbox.
pub async fn mint(
    db: &Db,
    tenant: TenantId,
    ring: &KeyRing,
    audit: &Audit,
    params: MintParams<'_>,
    mailer: Option<&mail::Mailer>,
) -> Result<Minted> {
    let MintParams { tenant_slug, public_url, workspace, connector, email, ttl_days } = params;
    let email = crate::members::normalize_email(email)?;
    let ttl_days = ttl_days.unwrap_or(DEFAULT_TTL_DAYS);
    if !(1..=MAX_TTL_DAYS).contains(&ttl_days) {
        return Err(Error::invalid("invalid_ttl", Some("ttl_days"), "a connect link lives from 1 to 30 days"));
    }
    let bound = workspaces::bound(db, tenant, workspace).await?;
    let c = bound.document.connectors.get(connector).ok_or(Error::NotFound { what: "connector" })?;
    match c.auth().oauth() {
        Some(o) if o.grant == workspaces::config::SlotKind::Shared => o.person_authorizes(connector)?,
        _ => {
            return Err(Error::Conflict {
                code: "not_oauth_shared",
                message: format!("connector `{connector}` takes no shared OAuth grant, so a connect link cannot authorize it"),
            });
        }
    }
    let secret = zeroize::Zeroizing::new(format!("{PREFIX}{}", secrets::random_b64(32)));
    let hash = secrets::digest(&secret);
    let link_url = zeroize::Zeroizing::new(url(public_url, tenant_slug, &secret));
    let subject = format!("Connect {connector} for the workspace {workspace}");
    let body = zeroize::Zeroizing::new(format!(
        "You were asked to connect your {connector} account to the Gatehouse workspace {workspace} ({tenant_slug}).\n\n\
         Follow this link within {ttl_days} days; it works once:\n{}\n",
        link_url.as_str()
    ));
    let ws_id = bound.workspace.id.0;
    let (email, hash, subject, body) = (&email, &hash, &subject, &body);
    let mut minted = db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let id = Uuid::now_v7();
            let row = store::NewLink { id, workspace: ws_id, connector, email, token_hash: hash, ttl_secs: ttl_days * 86_400 };
            let link = store::insert(&mut *conn, tenant, &row, &audit.actor).await?;
            let mail_id = Uuid::now_v7();
            let sealed = ring.seal(&mail_aad(tenant, mail_id), body.as_bytes());
            store::enqueue(&mut *conn, tenant, mail_id, email, subject, &sealed).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "connect_link.create",
                target: format!("connect_link:{id}"),
                before: None,
                after: Some(json!({ "workspace_id": ws_id, "connector": connector, "email": email, "expires_at": link.expires_at, "mail_id": mail_id })),
            };
            admin_log::record(conn, entry).await?;
            Ok(Minted { link, mail_id, delivered: false })
        })
    })
    .await?;
    if let Some(mailer) = mailer {
        match mailer.send(email, subject, body).await {
            Ok(()) => {
                minted.delivered =
                    mark_sent(db, tenant, &Audit { actor: "system:smtp".into(), request_id: None }, minted.mail_id).await?
            }
            Err(reason) => {
                tracing::warn!(%reason, mail_id = %minted.mail_id, "a connect link's mail stays in the outbox");
                mailer.undelivered(tenant, minted.mail_id, &reason);
            }
        }
    }
    Ok(minted)
}

pub async fn list(db: &Db, tenant: TenantId, history: bool) -> Result<Vec<Link>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant, history, 500))).await
}

/// Revokes an outstanding link. Idempotent: a revoked link answers as it is, and a used link
/// stays used (nothing changes, nothing is logged).
pub async fn revoke(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<Link> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            if let Some(link) = store::revoke(&mut *conn, tenant, id, &audit.actor).await? {
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "connect_link.revoke",
                    target: format!("connect_link:{id}"),
                    before: Some(json!({ "status": "outstanding" })),
                    after: Some(json!({ "status": "revoked" })),
                };
                admin_log::record(conn, entry).await?;
                return Ok(link);
            }
            store::get(conn, tenant, id).await?.ok_or(Error::NotFound { what: "connect link" })
        })
    })
    .await
}

/// Why a link cannot be used (or consumed) now.
fn refusal(link: &Link) -> Error {
    let (code, message) = match link.status.as_str() {
        "used" => ("link_used", "this connect link was already used"),
        "revoked" => ("link_revoked", "this connect link was revoked"),
        _ => ("link_expired", "this connect link has expired"),
    };
    Error::Conflict { code, message: message.into() }
}

/// The outstanding, unexpired link a secret names (read only: following a link consumes
/// nothing; the OAuth callback does).
pub async fn check(db: &Db, tenant: TenantId, secret: &str) -> Result<Link> {
    if !secrets::well_formed(secret, PREFIX, 43) {
        return Err(Error::NotFound { what: "connect link" });
    }
    let hash = secrets::digest(secret);
    let link = db
        .single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::by_token(conn, tenant, &hash)))
        .await?
        .ok_or(Error::NotFound { what: "connect link" })?;
    if link.status != "outstanding" || link.expired { Err(refusal(&link)) } else { Ok(link) }
}

/// Consumes a link (at the OAuth callback): one conditional update decides, so of racing
/// consumers exactly one wins; the others, and any expired, used or revoked link, are refused
/// (409 `link_used`, `link_revoked`, `link_expired`).
pub async fn consume(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid, account_label: &str) -> Result<Link> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            if let Some(link) = store::consume(&mut *conn, tenant, id, account_label).await? {
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "connect_link.consume",
                    target: format!("connect_link:{id}"),
                    before: Some(json!({ "status": "outstanding" })),
                    after: Some(json!({ "status": "used", "account_label": account_label })),
                };
                admin_log::record(conn, entry).await?;
                return Ok(link);
            }
            let link = store::get(conn, tenant, id).await?.ok_or(Error::NotFound { what: "connect link" })?;
            Err(refusal(&link))
        })
    })
    .await
}

/// Turns a used link back to outstanding when storing the credential failed after it was
/// consumed. Never undoes a revocation (only `used` rows move): `link_revoked` then.
pub async fn restore(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<Link> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            if let Some(link) = store::restore(&mut *conn, tenant, id).await? {
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "connect_link.restore",
                    target: format!("connect_link:{id}"),
                    before: Some(json!({ "status": "used" })),
                    after: Some(json!({ "status": "outstanding" })),
                };
                admin_log::record(conn, entry).await?;
                return Ok(link);
            }
            let link = store::get(conn, tenant, id).await?.ok_or(Error::NotFound { what: "connect link" })?;
            match link.status.as_str() {
                "outstanding" => Ok(link),
                _ => Err(refusal(&link)),
            }
        })
    })
    .await
}

/// The operator's outbox: undelivered mail (or all, with `all`), bodies opened with `ring`.
/// A body that no key of the ring opens (its key was retired) reads as a note saying so.
pub async fn outbox(db: &Db, ring: &KeyRing, tenant: TenantId, all: bool) -> Result<Vec<Mail>> {
    let mut mail = db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::outbox(conn, tenant, all, 500))).await?;
    for m in &mut mail {
        m.body = match ring.open(&mail_aad(tenant, m.id), &m.body) {
            Ok(plain) => String::from_utf8_lossy(&plain).into_owned(),
            Err(_) => "(this mail's body is sealed with a key the vault no longer holds)".to_owned(),
        };
    }
    Ok(mail)
}

/// Marks a mail delivered (by the operator, who forwarded it); admin-logged once.
pub async fn mark_sent(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<bool> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let done = store::mark_sent(&mut *conn, tenant, id).await?;
            if done {
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "outbox.sent",
                    target: format!("mail:{id}"),
                    before: None,
                    after: Some(json!({ "sent": true })),
                };
                admin_log::record(conn, entry).await?;
            }
            Ok(done)
        })
    })
    .await
}
