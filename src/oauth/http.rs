//! Downstream OAuth routes: the signed connect URL (`/oauth/connect`), a mailed connect link
//! (`/connect/{tenant}/{secret}`), the callback (`/oauth/callback`), and the grant's API
//! (`…/connectors/{id}/oauth/{shared|personal}`: show, connect URL, disconnect), a static
//! confidential client's secret (`…/connectors/{id}/oauth/client-secret`: set, show metadata,
//! remove), a member's identity token for enterprise-managed authorization
//! (`…/connectors/{id}/oauth/personal/identity-assertion`), and Gatehouse's Client ID Metadata Document (`/oauth/client-metadata.json`). No
//! answer ever carries a token or a secret.

use axum::{
    Json,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::{ConnectParams, Origin};
use crate::{
    AppState,
    auth::{TenantCtx, session_cookie},
    db::Scope,
    error::{Error, Result},
    members::{self, Permission},
    pages::{self, escape},
    sessions, tenants,
    vault::{Owner, slots::Slot},
    workspaces::{self, Connector, config::SlotKind},
};

fn browser_error(state: &AppState, e: Error) -> Response {
    if e.status() == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(error = %e, "downstream OAuth failed");
        return pages::error_page(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error", state.config.dev_sign_in());
    }
    pages::error_page(e.status(), e.code(), &e.to_string(), state.config.dev_sign_in())
}

/// Who is behind this browser, for `tenant`.
enum Browser {
    SignedOut,
    /// Signed in, but no member of the tenant.
    Stranger,
    Member(Uuid),
}

async fn browser(state: &AppState, headers: &HeaderMap, tenant: crate::ids::TenantId) -> Result<Browser> {
    if session_cookie(headers, state.config.cookie_secure()).is_none() {
        return Ok(Browser::SignedOut);
    }
    Ok(match session_member(state, headers, tenant).await? {
        Some(m) => Browser::Member(m),
        None if has_session(state, headers).await? => Browser::Stranger,
        None => Browser::SignedOut,
    })
}

async fn has_session(state: &AppState, headers: &HeaderMap) -> Result<bool> {
    let Some(raw) = session_cookie(headers, state.config.cookie_secure()) else { return Ok(false) };
    Ok(sessions::lookup(&state.db, raw).await?.is_some())
}

/// The signed-in member of `tenant` behind this browser, if any.
async fn session_member(state: &AppState, headers: &HeaderMap, tenant: crate::ids::TenantId) -> Result<Option<Uuid>> {
    let Some(raw) = session_cookie(headers, state.config.cookie_secure()) else { return Ok(None) };
    let Some(session) = sessions::lookup(&state.db, raw).await? else { return Ok(None) };
    // A session of another tenant's own connection is nobody here.
    if !session.may_enter(tenant) {
        return Ok(None);
    }
    let principal = session.principal.clone();
    let member = state
        .db
        .single_decision(Scope::Tenant(tenant), |conn, _| {
            let (principal, session) = (principal.clone(), &session);
            Box::pin(async move {
                let member = members::tx::by_principal(&mut *conn, tenant, &principal).await?;
                if member.is_some() {
                    crate::sso::tx::check_session(conn, tenant, session).await?;
                }
                Ok(member)
            })
        })
        .await?;
    Ok(member.map(|m| m.id))
}

fn connector_of(bound: &workspaces::Bound, id: &str) -> Result<Connector> {
    let c = bound.document.connectors.get(id).ok_or(Error::NotFound { what: "connector" })?;
    if c.auth().oauth().is_none() {
        return Err(Error::Conflict { code: "not_oauth", message: format!("connector `{id}` does not authenticate with OAuth") });
    }
    Ok(c.clone())
}

async fn connect(State(state): State<AppState>, headers: HeaderMap, uri: Uri, Query(p): Query<ConnectParams>) -> Response {
    let run = async {
        super::verify_connect(&state, &p).await?;
        let tenant = tenants::by_slug(&state.db, &p.t).await?;
        match browser(&state, &headers, tenant.id).await? {
            Browser::SignedOut => {
                // Sign in first, then come back to this very URL.
                let next = uri.path_and_query().map(|pq| pq.as_str().to_owned()).unwrap_or_default();
                let mut login = url::Url::parse("http://x/login").map_err(anyhow::Error::from)?;
                login.query_pairs_mut().append_pair("next", &next);
                return Ok(Redirect::to(&format!("/login?{}", login.query().unwrap_or_default())).into_response());
            }
            Browser::Stranger => {
                return Err(Error::Forbidden {
                    code: "wrong_member",
                    message: "this connect link was made for another person; sign in as them".into(),
                });
            }
            Browser::Member(m) if m != p.m => {
                return Err(Error::Forbidden {
                    code: "wrong_member",
                    message: "this connect link was made for another person; sign in as them".into(),
                });
            }
            Browser::Member(_) => {}
        }
        let bound = workspaces::bound(&state.db, tenant.id, &p.w).await?;
        let connector = connector_of(&bound, &p.c)?;
        let url = super::start(&state, tenant.id, bound.workspace.id.0, &p.c, &connector, Origin::Member(p.m)).await?;
        Ok::<_, Error>(Redirect::to(&url).into_response())
    };
    run.await.unwrap_or_else(|e| browser_error(&state, e))
}

async fn follow_link(State(state): State<AppState>, Path((tenant, secret)): Path<(String, String)>) -> Response {
    let run = async {
        let tenant = tenants::by_slug(&state.db, &tenant).await?;
        let link = crate::connect_links::check(&state.db, tenant.id, &secret).await?;
        let bound = workspaces::bound_by_id(&state.db, tenant.id, link.workspace_id).await?;
        let connector = connector_of(&bound, &link.connector)?;
        let url = super::start(&state, tenant.id, link.workspace_id, &link.connector, &connector, Origin::Link(link.id)).await?;
        Ok::<_, Error>(Redirect::to(&url).into_response())
    };
    run.await.unwrap_or_else(|e| browser_error(&state, e))
}

#[derive(Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    /// RFC 9207's issuer of the response.
    iss: Option<String>,
}

async fn callback(State(state): State<AppState>, headers: HeaderMap, Query(q): Query<CallbackQuery>) -> Response {
    let run = async {
        if let Some(error) = q.error {
            let error: String = error.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
            return Err(Error::Forbidden {
                code: "authorization_denied",
                message: format!("the authorization server answered `{error}`"),
            });
        }
        let (Some(code), Some(flow_state)) = (q.code, q.state) else {
            return Err(Error::invalid("invalid_callback", None, "the callback carries no code and state"));
        };
        let tenant = flow_state.split_once('.').and_then(|(t, _)| Uuid::parse_str(t).ok()).map(crate::ids::TenantId);
        let member = match tenant {
            Some(t) => session_member(&state, &headers, t).await?.map(|m| (t, m)),
            None => None,
        };
        let done = super::finish(&state, &flow_state, &code, q.iss.as_deref(), member).await?;
        let label = done.account_label.as_deref().map(|l| format!(" as {}", escape(l))).unwrap_or_default();
        let body = format!(
            "<p>The connector <code>{}</code> is authorized{label} ({} grant). You can close this page.</p>",
            escape(&done.connector),
            done.grant
        );
        Ok(pages::page(StatusCode::OK, "Connected", state.config.dev_sign_in(), &body))
    };
    run.await.unwrap_or_else(|e| browser_error(&state, e))
}

type GrantPath = Path<(String, String, String, String)>;

/// The grant a request manages: the shared one needs `credential_administration`, a personal
/// one is the signed-in member's own. Tokens never manage grants.
async fn grant_of(
    state: &AppState,
    ctx: &TenantCtx,
    ws: &str,
    id: &str,
    kind: &str,
) -> Result<(Uuid, Connector, SlotKind, Owner)> {
    let kind = match kind {
        "shared" => SlotKind::Shared,
        "personal" => SlotKind::Personal,
        _ => return Err(Error::NotFound { what: "grant" }),
    };
    let owner = match kind {
        SlotKind::Shared => {
            ctx.require_person(Permission::CredentialAdministration)?;
            Owner::Shared
        }
        SlotKind::Personal => Owner::Member(ctx.own_member()?),
    };
    let bound = workspaces::bound(&state.db, ctx.tenant.id, ws).await?;
    let connector = connector_of(&bound, id)?;
    let grant = connector.auth().oauth().map(|o| o.grant);
    if grant != Some(kind) {
        return Err(Error::Conflict {
            code: "slot_mismatch",
            message: format!("connector `{id}` takes no {} grant", kind.as_str()),
        });
    }
    Ok((bound.workspace.id.0, connector, kind, owner))
}

/// The answer of `POST …/oauth/{grant}/connect`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ConnectUrl {
    connector: String,
    url: String,
    expires_in_s: u64,
}

/// The answer of `DELETE …/oauth/client-secret`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct RemovedSecret {
    connector: String,
    /// Always `oauth_client`.
    owner: String,
    /// Always `missing`.
    state: String,
}

/// The OAuth grant of a connector (`shared` or `personal`); never a token.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}", tag = "oauth", responses((status = 200, body = super::GrantInfo)))]
async fn show_grant(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id, kind)): GrantPath,
) -> Result<Json<super::GrantInfo>> {
    let (workspace, _, kind, owner) = grant_of(&state, &ctx, &ws, &id, &kind).await?;
    Ok(Json(super::show(&state, ctx.tenant.id, workspace, &id, kind, owner).await?))
}

/// A URL that starts the OAuth authorization of this connector for the signed-in person.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}/connect", tag = "oauth", security(("session" = [])), responses((status = 200, body = ConnectUrl)))]
async fn connect_url(ctx: TenantCtx, State(state): State<AppState>, Path((_, ws, id, kind)): GrantPath) -> Result<Json<Value>> {
    let (_, connector, _, _) = grant_of(&state, &ctx, &ws, &id, &kind).await?;
    // A signed connect URL is a bearer link, and its flow names a member who would own it.
    ctx.refuse_impersonation("mint OAuth connect URLs")?;
    if let Some(o) = connector.auth().oauth() {
        o.person_authorizes(&id)?;
    }
    let member = ctx.person()?.id;
    let url = super::connect_url(&state, &ctx.tenant.slug, &ws, &id, member).await?;
    Ok(Json(json!({ "connector": id, "url": url, "expires_in_s": super::CONNECT_TTL_SECS })))
}

/// A member's identity token, presented for a connector with enterprise-managed authorization.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct IdentityToken {
    /// An identity token (a signed JWT) from the connector's identity provider, naming the
    /// signed-in member (their sign-in principal, or their verified email).
    identity_token: String,
}

impl Drop for IdentityToken {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.identity_token.zeroize();
    }
}

/// Connects the signed-in member's own grant of a connector with `"flow":
/// "identity_assertion"`: the identity token is exchanged at the identity provider for an
/// identity assertion (RFC 8693), which gets the downstream token as a JWT bearer grant (RFC
/// 7523). Answers the grant; neither token is kept or shown.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/personal/identity-assertion", tag = "oauth", security(("session" = [])), request_body = IdentityToken, responses((status = 200, body = super::GrantInfo)))]
async fn assert_identity(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id)): SecretPath,
    crate::extract::ApiJson(body): crate::extract::ApiJson<IdentityToken>,
) -> Result<Json<super::GrantInfo>> {
    let (workspace, connector, kind, owner) = grant_of(&state, &ctx, &ws, &id, "personal").await?;
    let o = connector.auth().oauth().ok_or(Error::NotFound { what: "grant" })?;
    if o.flow != workspaces::config::Flow::IdentityAssertion {
        return Err(Error::Conflict {
            code: "not_identity_assertion",
            message: format!("connector `{id}` does not take identity tokens (`\"flow\": \"identity_assertion\"`)"),
        });
    }
    let member = ctx.person()?;
    let token = &body.identity_token;
    super::identity_assertion::connect(&state, ctx.tenant.id, workspace, &id, &connector, o, member, token, &ctx.audit).await?;
    Ok(Json(super::show(&state, ctx.tenant.id, workspace, &id, kind, owner).await?))
}

/// Disconnects an OAuth grant (and asks the provider to revoke it when it advertises how).
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}", tag = "oauth", responses((status = 200, body = Object, description = "What was disconnected and whether the provider was asked to revoke")))]
async fn disconnect(ctx: TenantCtx, State(state): State<AppState>, Path((_, ws, id, kind)): GrantPath) -> Result<Json<Value>> {
    let (workspace, connector, _, owner) = grant_of(&state, &ctx, &ws, &id, &kind).await?;
    let o = connector.auth().oauth().cloned().ok_or(Error::NotFound { what: "grant" })?;
    let slot = Slot { tenant: ctx.tenant.id, workspace, connector: &id, owner };
    Ok(Json(super::disconnect(&state, &ctx.audit, &slot, &connector, &o).await?))
}

/// Exactly one of the two: the client's secret, or its private key (PKCS#8 PEM of a P-256, RSA
/// or Ed25519 key), which signs `private_key_jwt` assertions.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SetSecret {
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    private_key: Option<String>,
}

impl Drop for SetSecret {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.client_secret.zeroize();
        self.private_key.zeroize();
    }
}

type SecretPath = Path<(String, String, String)>;

/// The client secret slot a request manages (people with `credential_administration` only).
async fn secret_slot(state: &AppState, ctx: &TenantCtx, ws: &str, id: &str) -> Result<Uuid> {
    ctx.require_person(Permission::CredentialAdministration)?;
    crate::vault::slots::require(state.config.vault_keys.as_ref())?;
    super::client_auth::confidential_connector(&state.db, ctx.tenant.id, ws, id).await
}

/// Sets the connector's OAuth client secret.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", tag = "oauth", security(("session" = [])), request_body = SetSecret, responses((status = 200, body = crate::vault::slots::Metadata)))]
async fn set_secret(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id)): SecretPath,
    crate::extract::ApiJson(mut body): crate::extract::ApiJson<SetSecret>,
) -> Result<Json<crate::vault::slots::Metadata>> {
    let workspace = secret_slot(&state, &ctx, &ws, &id).await?;
    let mut values = std::collections::BTreeMap::new();
    if let Some(secret) = body.client_secret.take() {
        values.insert(super::client_auth::SECRET_FIELD.to_owned(), secret);
    }
    if let Some(key) = body.private_key.take() {
        values.insert(super::assertion::KEY_FIELD.to_owned(), key);
    }
    let fields = crate::vault::slots::Fields(values);
    super::client_auth::check_client_fields(&fields.0)?;
    let ring = crate::vault::slots::require(state.config.vault_keys.as_ref())?;
    let slot = super::client_auth::secret_slot(ctx.tenant.id, workspace, &id);
    Ok(Json(crate::vault::slots::set(&state.db, ring, &ctx.audit, slot, SlotKind::Shared, fields).await?))
}

/// The OAuth client secret's metadata (never its value).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", tag = "oauth", security(("session" = [])), responses((status = 200, body = crate::vault::slots::Metadata), (status = 409, response = crate::error::Problem)))]
async fn show_secret(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id)): SecretPath,
) -> Result<Json<crate::vault::slots::Metadata>> {
    let workspace = secret_slot(&state, &ctx, &ws, &id).await?;
    let slot = super::client_auth::secret_slot(ctx.tenant.id, workspace, &id);
    Ok(Json(crate::vault::slots::show(&state.db, slot, SlotKind::Shared).await?))
}

/// Removes the connector's OAuth client secret.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", tag = "oauth", security(("session" = [])), responses((status = 200, body = RemovedSecret)))]
async fn remove_secret(ctx: TenantCtx, State(state): State<AppState>, Path((_, ws, id)): SecretPath) -> Result<Json<Value>> {
    let workspace = secret_slot(&state, &ctx, &ws, &id).await?;
    let slot = super::client_auth::secret_slot(ctx.tenant.id, workspace, &id);
    crate::vault::slots::remove(&state.db, &ctx.audit, slot).await?;
    Ok(Json(json!({ "connector": id, "owner": "oauth_client", "state": "missing" })))
}

/// Gatehouse's Client ID Metadata Document: public, the same for every tenant.
async fn client_metadata(State(state): State<AppState>) -> Response {
    let mut response = Json(super::client_auth::document(&state)).into_response();
    // Servers cache it; a changed public URL is a new client id anyway.
    response.headers_mut().insert("cache-control", axum::http::HeaderValue::from_static("public, max-age=3600"));
    response
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(show_secret, set_secret, remove_secret))
        .routes(routes!(show_grant, disconnect))
        .routes(routes!(connect_url))
        .routes(routes!(assert_identity))
        .route("/oauth/client-metadata.json", get(client_metadata))
        .route("/oauth/connect", get(connect))
        .route("/oauth/callback", get(callback))
        .route("/connect/{tenant}/{secret}", get(follow_link))
}
