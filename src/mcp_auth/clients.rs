//! MCP clients: dynamic registration (RFC 7591) and Client ID Metadata Documents (an https
//! `client_id` whose document Gatehouse fetches, bounded in size and time).

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::json;

use super::{CLIENT_PREFIX, oauth_error, redirect_allowed, store};
use crate::{
    AppState,
    admin_log::{self, Audit, Entry},
    config::{Config, Environment},
    db::Scope,
    error::{Error, Result},
    ids::TenantId,
    secrets, tenants,
};

/// Largest metadata document accepted.
pub const DOCUMENT_MAX_BYTES: usize = 16 * 1024;
const DOCUMENT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_REDIRECT_URIS: usize = 10;
/// Anonymous registrations of the last day that no grant uses yet, per tenant.
pub const UNUSED_REGISTRATIONS_CAP: i64 = 1000;

/// What an authorization request's `client_id` names.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    /// `registered` or `metadata_document`.
    pub kind: &'static str,
    /// The stored row (always present for registered clients).
    pub row: Option<store::Client>,
}

/// Whether `client_id` is a metadata document URL: https with a path, or (outside
/// production) http on loopback for local development and tests.
pub fn is_document_url(config: &Config, client_id: &str) -> bool {
    let Ok(url) = url::Url::parse(client_id) else { return false };
    let https = url.scheme() == "https" && url.path() != "/" && url.host().is_some();
    let dev = config.env == Environment::Development && super::is_loopback_http(client_id) && url.path() != "/";
    (https || dev) && url.fragment().is_none() && url.username().is_empty() && url.password().is_none()
}

#[derive(Deserialize)]
struct Document {
    client_id: String,
    client_name: Option<String>,
    redirect_uris: Vec<String>,
    token_endpoint_auth_method: Option<String>,
}

fn clean_name(name: Option<&str>) -> Result<String> {
    let name = name.map(|n| n.split_whitespace().collect::<Vec<_>>().join(" ")).unwrap_or_default();
    if name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(Error::invalid("invalid_client_metadata", Some("client_name"), "client_name is at most 200 characters"));
    }
    Ok(if name.is_empty() { "Unnamed MCP client".into() } else { name })
}

fn check_redirects(config: &Config, uris: &[String]) -> Result<()> {
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err(Error::invalid("invalid_redirect_uri", Some("redirect_uris"), "give 1 to 10 redirect URIs"));
    }
    if let Some(bad) = uris.iter().find(|u| !redirect_allowed(config, u)) {
        return Err(Error::invalid(
            "invalid_redirect_uri",
            Some("redirect_uris"),
            format!(
                "redirect URI `{}` is neither loopback nor on this deployment's allow-list",
                bad.chars().take(200).collect::<String>()
            ),
        ));
    }
    Ok(())
}

/// Fetches and checks a client's metadata document.
/// Whether an address is on the public internet (not loopback, private, link-local, shared,
/// unspecified, multicast or documentation space).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80)
            }
        },
    }
}

/// An outbound client pinned to the address the document's host resolves to now, so what was
/// checked is what is connected to (no second lookup to rebind). In production only public
/// addresses are fetched: a client id must not make Gatehouse reach into its own network.
async fn pinned_client(config: &Config, url: &url::Url) -> Result<reqwest::Client> {
    let refuse = |why: &str| Error::invalid("invalid_client", Some("client_id"), format!("client metadata document: {why}"));
    let host = url.host_str().ok_or_else(|| refuse("has no host"))?;
    let port = url.port_or_known_default().ok_or_else(|| refuse("has no port"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr: SocketAddr = tokio::time::timeout(DOCUMENT_TIMEOUT, tokio::net::lookup_host((bare, port)))
        .await
        .map_err(|_| refuse("its host did not resolve in time"))?
        .map_err(|_| refuse("its host does not resolve"))?
        .next()
        .ok_or_else(|| refuse("its host does not resolve"))?;
    if config.env == Environment::Production && !is_public(addr.ip()) {
        return Err(refuse("its host is not a public address"));
    }
    crate::install_crypto();
    Ok(reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(DOCUMENT_TIMEOUT)
        .connect_timeout(DOCUMENT_TIMEOUT)
        .resolve(bare, addr)
        .build()
        .map_err(anyhow::Error::from)?)
}

async fn fetch_document(config: &Config, url: &str) -> Result<Document> {
    let refuse = |why: &str| Error::invalid("invalid_client", Some("client_id"), format!("client metadata document: {why}"));
    let parsed = url::Url::parse(url).map_err(|_| refuse("is not a URL"))?;
    let mut response = pinned_client(config, &parsed)
        .await?
        .get(url)
        .header("accept", "application/json")
        .timeout(DOCUMENT_TIMEOUT)
        .send()
        .await
        .map_err(|_| refuse("could not be fetched"))?;
    if response.status() != StatusCode::OK {
        return Err(refuse(&format!("answered HTTP {}", response.status().as_u16())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| refuse("could not be read"))? {
        body.extend_from_slice(&chunk);
        if body.len() > DOCUMENT_MAX_BYTES {
            return Err(refuse("is too large"));
        }
    }
    read_document(url, &body)
}

/// A fetched metadata document's body, checked: JSON of the document's shape, naming `url` as
/// its `client_id`, for a public client.
fn read_document(url: &str, body: &[u8]) -> Result<Document> {
    let refuse = |why: &str| Error::invalid("invalid_client", Some("client_id"), format!("client metadata document: {why}"));
    let doc: Document = serde_json::from_slice(body).map_err(|_| refuse("is not a client metadata document"))?;
    if doc.client_id != url {
        return Err(refuse("names another client_id"));
    }
    if doc.token_endpoint_auth_method.as_deref().is_some_and(|m| m != "none") {
        return Err(refuse("only public clients (token_endpoint_auth_method none) are supported"));
    }
    Ok(doc)
}

/// The metadata document's checks, reached by the fuzz targets (`fuzz/`) only.
#[doc(hidden)]
pub mod fuzzing {
    use crate::{config::Config, error::Result};

    /// What [`super::resolve`] takes of the document `body` fetched from `url`: the client's
    /// display name and its redirect URIs.
    pub fn document(config: &Config, url: &str, body: &[u8]) -> Result<(String, Vec<String>)> {
        let doc = super::read_document(url, body)?;
        let name = super::clean_name(doc.client_name.as_deref())?;
        super::check_redirects(config, &doc.redirect_uris)?;
        Ok((name, doc.redirect_uris))
    }

    /// A client name as it is shown (whitespace runs collapsed), or its refusal.
    pub fn clean_name(name: Option<&str>) -> Result<String> {
        super::clean_name(name)
    }
}

/// Resolves an authorization request's client. Refusals here are shown as a page, never
/// redirected (the redirect URI is not trusted yet).
pub async fn resolve(state: &AppState, tenant: TenantId, client_id: &str) -> Result<Resolved> {
    let row = state.db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::client(conn, tenant, client_id))).await?;
    if row.as_ref().is_some_and(|r| r.revoked) {
        return Err(Error::Forbidden { code: "client_revoked", message: "this client's access was revoked by an admin".into() });
    }
    if is_document_url(&state.config, client_id) {
        let doc = fetch_document(&state.config, client_id).await?;
        let name = clean_name(doc.client_name.as_deref())?;
        check_redirects(&state.config, &doc.redirect_uris)?;
        return Ok(Resolved {
            client_id: client_id.to_owned(),
            name,
            redirect_uris: doc.redirect_uris,
            kind: "metadata_document",
            row,
        });
    }
    let row = row.ok_or(Error::invalid("invalid_client", Some("client_id"), "unknown client"))?;
    Ok(Resolved {
        client_id: row.client_id.clone(),
        name: row.name.clone(),
        redirect_uris: row.redirect_uris.clone(),
        kind: "registered",
        row: Some(row),
    })
}

/// The stored row of a resolved client, inserting or refreshing a metadata-document client
/// inside the caller's transaction (the grant's).
pub async fn persist(conn: &mut sqlx::PgConnection, tenant: TenantId, audit: &Audit, c: &Resolved) -> Result<store::Client> {
    match &c.row {
        Some(row) => {
            if c.kind == "metadata_document" {
                store::refresh_document_client(&mut *conn, tenant, row.id, &c.name, &c.redirect_uris).await?;
            }
            Ok(row.clone())
        }
        None => {
            let row =
                store::insert_client(&mut *conn, tenant, &c.client_id, c.kind, &c.name, &c.redirect_uris).await.map_err(|e| {
                    e.on_constraint("mcp_clients_client_id_key", || Error::Unavailable {
                        code: "contention",
                        message: "the client was recorded concurrently; retry".into(),
                        retry_after_ms: Some(200),
                    })
                })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "mcp_client.discover",
                target: format!("mcp_client:{}", row.id),
                before: None,
                after: Some(json!({ "client_id": row.client_id, "name": row.name, "redirect_uris": row.redirect_uris })),
            };
            admin_log::record(conn, entry).await?;
            Ok(row)
        }
    }
}

#[derive(Deserialize)]
struct Registration {
    redirect_uris: Option<Vec<String>>,
    client_name: Option<String>,
    token_endpoint_auth_method: Option<String>,
    grant_types: Option<Vec<String>>,
    response_types: Option<Vec<String>>,
}

/// `POST /t/{tenant}/oauth/register`: dynamic client registration of a public client.
pub async fn register(
    State(state): State<AppState>,
    Path(slug): Path<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    match register_client(&state, &slug, &headers, &body).await {
        Ok(r) => r,
        Err(Error::NotFound { what }) => Error::NotFound { what }.into_response(),
        Err(e @ Error::Invalid { .. }) => oauth_error(StatusCode::BAD_REQUEST, e.code(), &e.to_string()),
        Err(e) => e.into_response(),
    }
}

async fn register_client(state: &AppState, slug: &str, headers: &axum::http::HeaderMap, body: &[u8]) -> Result<Response> {
    let tenant = tenants::by_slug(&state.db, slug).await?;
    let reg: Registration = serde_json::from_slice(body)
        .map_err(|_| Error::invalid("invalid_client_metadata", None, "the body is not a client registration (JSON)"))?;
    let uris = reg.redirect_uris.unwrap_or_default();
    check_redirects(&state.config, &uris)?;
    let name = clean_name(reg.client_name.as_deref())?;
    if reg
        .token_endpoint_auth_method
        .as_deref()
        .is_some_and(|m| !matches!(m, "none" | "client_secret_post" | "client_secret_basic"))
    {
        return Err(Error::invalid("invalid_client_metadata", Some("token_endpoint_auth_method"), "unsupported method"));
    }
    if reg.grant_types.as_ref().is_some_and(|g| g.iter().any(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token"))) {
        return Err(Error::invalid("invalid_client_metadata", Some("grant_types"), "only authorization_code and refresh_token"));
    }
    if reg.response_types.as_ref().is_some_and(|r| r.iter().any(|r| r != "code")) {
        return Err(Error::invalid("invalid_client_metadata", Some("response_types"), "only code"));
    }
    let client_id = format!("{CLIENT_PREFIX}{}", secrets::random_b64(16));
    let audit = Audit { actor: "mcp_registration".into(), request_id: crate::extract::request_id(headers) };
    let row = state
        .db
        .serializable(Scope::Tenant(tenant.id), |conn, _| {
            let (client_id, name, uris, audit) = (client_id.clone(), name.clone(), uris.clone(), audit.clone());
            Box::pin(async move {
                // Counted in the same serializable transaction as the insert: concurrent
                // registrations cannot overshoot the cap.
                if store::prune_registrations(&mut *conn, tenant.id).await? >= UNUSED_REGISTRATIONS_CAP {
                    return Err(Error::Unavailable {
                        code: "registration_limit",
                        message: "too many unused client registrations in this tenant; retry later".into(),
                        retry_after_ms: Some(60_000),
                    });
                }
                let row = store::insert_client(&mut *conn, tenant.id, &client_id, "registered", &name, &uris).await?;
                let entry = Entry {
                    tenant: Some(tenant.id),
                    audit: &audit,
                    action: "mcp_client.register",
                    target: format!("mcp_client:{}", row.id),
                    before: None,
                    after: Some(json!({ "client_id": row.client_id, "name": row.name, "redirect_uris": row.redirect_uris })),
                };
                admin_log::record(conn, entry).await?;
                Ok(row)
            })
        })
        .await?;
    // A public client: whatever method was asked for, none is what it gets (RFC 7591 §3.2.1
    // lets the server replace requested metadata).
    let body = json!({
        "client_id": row.client_id,
        "client_id_issued_at": chrono::Utc::now().timestamp(),
        "client_name": row.name,
        "redirect_uris": row.redirect_uris,
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": super::SCOPE,
    });
    Ok(crate::extract::no_store((StatusCode::CREATED, Json(body)).into_response()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn production_refuses_documents_on_internal_addresses() {
        let mut config = Config::from_lookup(|_| None).unwrap();
        config.env = Environment::Production;
        let err = fetch_document(&config, "https://127.0.0.1:1/client.json").await.err().unwrap();
        assert!(err.to_string().contains("not a public address"), "{err}");
        assert!(!is_document_url(&config, "http://127.0.0.1:1/client.json"), "no plain http in production");
    }
}
