//! SCIM 2.0 provisioning per tenant (RFC 7643/7644; issue 22 item 2): a tenant's directory
//! creates, updates and deprovisions its Users and Groups at `/scim/v2/t/{tenant}/…`,
//! authenticated by a SCIM token (`gsm_` + 43 characters, shown once, only its SHA-256 kept).
//!
//! A User is linked to the tenant's member with the same email address (the User's primary
//! email, else its first). Deprovisioning it (`active: false`, or deleting it) removes that
//! member in the same transaction through the members' fence: their sessions end, their
//! personal tokens and MCP OAuth grants stop authenticating, on every replica before the
//! answer is sent (the removal moves the tenant's epoch). A Group whose displayName is a
//! role name (`admin`, `operator`, `member`) gives its Users' members that role: the highest
//! of their role groups, `member` when in none (once the tenant has any role group). Owners
//! are never changed by the directory.

pub mod cli;
pub mod filter;
mod groups;
pub mod http;
pub mod patch;
pub mod schema;
mod store;
mod users;

pub use groups::{create_group, delete_group, get_group, list_groups, patch_group, replace_group};
pub use users::{create_user, delete_user, get_user, list_users, patch_user, replace_user};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::Error,
    ids::TenantId,
    secrets,
};
use schema::{Projection, ResourceKind};

pub const TOKEN_PREFIX: &str = "gsm_";
pub const TOKEN_SECRET_CHARS: usize = 43;
/// Results one page holds at most (`count` above it is lowered to it).
pub const MAX_PAGE: usize = 200;
pub const ERROR_URN: &str = "urn:ietf:params:scim:api:messages:2.0:Error";
pub const LIST_URN: &str = "urn:ietf:params:scim:api:messages:2.0:ListResponse";

/// A SCIM error (RFC 7644 §3.12): an HTTP status, a `scimType` for 400s (and 409
/// `uniqueness`), and a detail that never carries a secret.
#[derive(Clone, Debug)]
pub struct ScimError {
    pub status: u16,
    pub scim_type: Option<&'static str>,
    pub detail: String,
}

/// The `scimType`s of RFC 7644 table 9 that a 400 may carry.
const SCIM_TYPES: [&str; 9] = [
    "invalidFilter",
    "tooMany",
    "uniqueness",
    "mutability",
    "invalidSyntax",
    "invalidPath",
    "noTarget",
    "invalidValue",
    "sensitive",
];

impl ScimError {
    pub fn bad(scim_type: &'static str, detail: impl Into<String>) -> ScimError {
        ScimError { status: 400, scim_type: Some(scim_type), detail: detail.into() }
    }
    pub fn syntax(detail: impl Into<String>) -> ScimError {
        ScimError::bad("invalidSyntax", detail)
    }
    pub fn value(detail: impl Into<String>) -> ScimError {
        ScimError::bad("invalidValue", detail)
    }
    pub fn status(status: u16, detail: impl Into<String>) -> ScimError {
        ScimError { status, scim_type: None, detail: detail.into() }
    }
    pub fn body(&self) -> Value {
        let mut body = json!({ "schemas": [ERROR_URN], "status": self.status.to_string(), "detail": self.detail });
        if let Some(t) = self.scim_type {
            body["scimType"] = json!(t);
        }
        body
    }
}

/// Carried through a transaction as the crate's error, and back without loss.
impl From<ScimError> for Error {
    fn from(e: ScimError) -> Error {
        match e.status {
            404 => Error::NotFound { what: "resource" },
            409 => Error::Conflict { code: "uniqueness", message: e.detail },
            _ => Error::Invalid { code: e.scim_type.unwrap_or("invalidValue"), message: e.detail, field: None },
        }
    }
}

impl From<Error> for ScimError {
    fn from(e: Error) -> ScimError {
        match e {
            Error::NotFound { what } => ScimError::status(404, format!("{what} not found")),
            Error::Invalid { code, message, .. } => {
                ScimError::bad(SCIM_TYPES.iter().find(|t| **t == code).copied().unwrap_or("invalidValue"), message)
            }
            Error::InvalidConfig { .. } => ScimError::value("invalid value"),
            Error::Conflict { code: "uniqueness", message } => {
                ScimError { status: 409, scim_type: Some("uniqueness"), detail: message }
            }
            Error::Conflict { message, .. } => ScimError::status(409, message),
            Error::Precondition { message, .. } => ScimError::status(412, message),
            Error::Forbidden { message, .. } => ScimError::status(403, message),
            Error::Unauthorized => ScimError::status(401, "authentication required"),
            Error::PayloadTooLarge => ScimError::status(413, "request body too large"),
            Error::Unavailable { message, .. } => ScimError::status(503, message),
            Error::Moved { base_url, .. } => ScimError::status(421, format!("this tenant has moved to {base_url}")),
            // Logged once where it happened (`db::report`); a lost connection or a read-only
            // node is retryable.
            e @ Error::Database(_) if e.status().as_u16() == 503 => {
                tracing::warn!(error = %e, "SCIM request: database unavailable");
                ScimError::status(503, "the database is unavailable; retry")
            }
            Error::Database(e) => {
                tracing::debug!(error = %e, "SCIM request: database error answered as 500");
                ScimError::status(500, "internal error")
            }
            Error::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "SCIM request failed");
                ScimError::status(500, "internal error")
            }
        }
    }
}

pub type ScimResult<T> = std::result::Result<T, ScimError>;

/// A SCIM token as listed (never its secret).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ScimToken {
    pub id: Uuid,
    pub prefix: String,
    pub name: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token just minted: the only time its secret exists outside the directory's hands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ScimTokenCreated)]
pub struct CreatedToken {
    pub token: ScimToken,
    pub secret: String,
}

/// Mints a SCIM token for the tenant's directory, with its admin-log row.
pub async fn create_token(db: &Db, tenant: TenantId, audit: &Audit, name: &str) -> crate::error::Result<CreatedToken> {
    let name = crate::tokens::normalize_name(name)?;
    let secret = format!("{TOKEN_PREFIX}{}", secrets::random_b64(32));
    let hash = secrets::digest(&secret);
    let prefix: String = secret.chars().take(crate::tokens::DISPLAY_PREFIX_CHARS).collect();
    let token = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let (name, hash, prefix) = (name.clone(), hash.clone(), prefix.clone());
            Box::pin(async move {
                let token = store::insert_token(&mut *conn, tenant, &hash, &prefix, &name, &audit.actor).await?;
                let after = Some(json!({ "name": token.name, "prefix": token.prefix }));
                let target = format!("scim_token:{}", token.id);
                admin_log::record(
                    conn,
                    Entry { tenant: Some(tenant), audit, action: "scim_token.create", target, before: None, after },
                )
                .await?;
                Ok(token)
            })
        })
        .await?;
    Ok(CreatedToken { token, secret })
}

pub async fn list_tokens(db: &Db, tenant: TenantId) -> crate::error::Result<Vec<ScimToken>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list_tokens(conn, tenant))).await
}

/// Revokes a SCIM token (idempotent); the next request with it is refused.
pub async fn revoke_token(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> crate::error::Result<ScimToken> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            match store::revoke_token(&mut *conn, tenant, id).await? {
                Some(token) => {
                    let after = Some(json!({ "revoked_at": token.revoked_at }));
                    let target = format!("scim_token:{id}");
                    let entry = Entry { tenant: Some(tenant), audit, action: "scim_token.revoke", target, before: None, after };
                    admin_log::record(conn, entry).await?;
                    Ok(token)
                }
                None => store::get_token(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "SCIM token" }),
            }
        })
    })
    .await
}

/// The tenant and token id of a live SCIM token.
pub async fn authenticate(db: &Db, raw: &str) -> crate::error::Result<Option<(TenantId, Uuid)>> {
    if !secrets::well_formed(raw, TOKEN_PREFIX, TOKEN_SECRET_CHARS) {
        return Ok(None);
    }
    let hash = secrets::digest(raw);
    db.serializable(Scope::Platform { reason: "authenticate a SCIM token" }, |conn, _| {
        let hash = hash.clone();
        Box::pin(async move { store::authenticate(conn, &hash).await })
    })
    .await
}

/// Where a tenant's SCIM resources live (`{public url}/scim/v2/t/{slug}`), for `location`
/// and `$ref`.
#[derive(Clone, Debug)]
pub struct Base(pub String);

impl Base {
    fn location(&self, kind: ResourceKind, id: Uuid) -> String {
        format!("{}/{}/{id}", self.0, kind.endpoint())
    }
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A resource as shown: its stored attributes, then `id`, `meta` and what the server adds.
fn render(kind: ResourceKind, base: &Base, r: &store::Resource, extra: Option<(&str, Value)>) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("schemas".into(), json!([kind.urn()]));
    doc.insert("id".into(), json!(r.id.to_string()));
    if let Value::Object(attrs) = &r.attrs {
        doc.extend(attrs.clone());
    }
    if let Some((k, v)) = extra
        && v.as_array().is_none_or(|a| !a.is_empty())
    {
        doc.insert(k.into(), v);
    }
    doc.insert(
        "meta".into(),
        json!({
            "resourceType": kind.name(),
            "created": time(r.created_at),
            "lastModified": time(r.updated_at),
            "location": base.location(kind, r.id),
            "version": format!("W/\"{}\"", r.version),
        }),
    );
    doc
}

fn user_groups(base: &Base, groups: &[(Uuid, String)]) -> Value {
    Value::Array(
        groups
            .iter()
            .map(|(id, name)| {
                json!({ "value": id.to_string(), "$ref": base.location(ResourceKind::Group, *id), "display": name, "type": "direct" })
            })
            .collect(),
    )
}

fn group_members(base: &Base, entries: &[Value]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if let Some(id) = e.get("value").and_then(Value::as_str).and_then(|v| v.parse::<Uuid>().ok())
                    && let Some(o) = e.as_object_mut()
                {
                    o.insert("$ref".into(), json!(base.location(ResourceKind::User, id)));
                }
                e
            })
            .collect(),
    )
}

/// What a list asks for (RFC 7644 §3.4.2): a filter, a 1-based start, a page size, and the
/// attributes to return.
#[derive(Clone, Debug)]
pub struct ListQuery {
    pub filter: Option<filter::Filter>,
    pub start_index: usize,
    pub count: usize,
    pub projection: Projection,
}

impl ListQuery {
    /// Reads the query parameters (or a `.search` body's members); a malformed filter or a
    /// number that is not one is a SCIM error.
    pub fn parse(
        kind: ResourceKind,
        filter: Option<&str>,
        start_index: Option<&str>,
        count: Option<&str>,
        attributes: Option<&str>,
        excluded: Option<&str>,
    ) -> ScimResult<ListQuery> {
        let number = |raw: Option<&str>, name: &str| -> ScimResult<Option<i64>> {
            raw.map(|s| s.trim().parse::<i64>().map_err(|_| ScimError::value(format!("'{name}' is not an integer")))).transpose()
        };
        let start_index = number(start_index, "startIndex")?.unwrap_or(1).max(1) as usize;
        let count = number(count, "count")?.unwrap_or(MAX_PAGE as i64).clamp(0, MAX_PAGE as i64) as usize;
        let filter = filter.map(|f| filter::parse(kind, f)).transpose()?;
        Ok(ListQuery { filter, start_index, count, projection: Projection::new(kind, attributes, excluded) })
    }
}

/// A page of the resources that match the query's filter, as a `ListResponse`.
fn list_response(query: &ListQuery, docs: Vec<Map<String, Value>>) -> Value {
    let matched: Vec<Value> =
        docs.into_iter().map(Value::Object).filter(|d| query.filter.as_ref().is_none_or(|f| filter::matches(f, d))).collect();
    let total = matched.len();
    let page: Vec<Value> = matched
        .into_iter()
        .skip(query.start_index - 1)
        .take(query.count)
        .map(|d| match d {
            Value::Object(d) => Value::Object(query.projection.apply(d)),
            other => other,
        })
        .collect();
    json!({
        "schemas": [LIST_URN],
        "totalResults": total,
        "itemsPerPage": page.len(),
        "startIndex": query.start_index,
        "Resources": page,
    })
}

fn unique(e: Error, constraint: &str, what: &str) -> Error {
    e.on_constraint(constraint, || Error::Conflict { code: "uniqueness", message: format!("{what} is already taken") })
}

fn log_entry<'a>(tenant: TenantId, audit: &'a Audit, action: &'a str, kind: ResourceKind, id: Uuid, after: Value) -> Entry<'a> {
    let target = format!("scim_{}:{id}", kind.name().to_lowercase());
    Entry { tenant: Some(tenant), audit, action, target, before: None, after: Some(after) }
}
