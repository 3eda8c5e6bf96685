//! The SCIM endpoint, `/scim/v2/t/{tenant}/…` (RFC 7644), authenticated by the tenant's SCIM
//! token, answering `application/scim+json` and SCIM errors only ([`router`], outside the
//! JSON API and its document); and the tenant admins' API for SCIM tokens,
//! `/api/v1/tenants/{tenant}/scim-tokens` ([`api_router`], part of the JSON API).

use axum::{
    Json, Router,
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Path, Query, Request, State},
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
    routing::{MethodRouter, any, get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::{
    Base, ListQuery, ScimError, ScimResult, ScimToken,
    schema::{self, Projection, ResourceKind},
};
use crate::{
    AppState,
    admin_log::Audit,
    auth::TenantCtx,
    error::{Error, Result},
    extract::{ApiJson, no_store, parse_id, request_id},
    scim,
    tenants::{self, Status},
};

pub const SCIM_JSON: &str = "application/scim+json";

impl IntoResponse for ScimError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, scim_json(self.body())).into_response();
        if self.status == 401 {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"scim\""));
        }
        r
    }
}

/// Where every SCIM route lives.
pub const PREFIX: &str = "/scim/";

/// An error the framework or a layer made up (no body, or plain text: a 413 from the body
/// limit, a 408 from the deadline …) under [`PREFIX`], answered as a SCIM error of that
/// status instead; SCIM errors and successes pass through.
pub fn scim_for_bare_errors(response: Response) -> Response {
    let status = response.status();
    let made_up = response.headers().get(header::CONTENT_TYPE).is_none_or(|v| v.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !made_up {
        return response;
    }
    let detail = status.canonical_reason().unwrap_or("error").to_lowercase();
    let mut replaced = ScimError::status(status.as_u16(), detail).into_response();
    for name in [header::ALLOW, header::RETRY_AFTER, header::WWW_AUTHENTICATE] {
        if let Some(v) = response.headers().get(&name) {
            replaced.headers_mut().insert(name, v.clone());
        }
    }
    replaced
}

fn scim_json(body: Value) -> Response {
    let mut r = Json(body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(SCIM_JSON));
    r
}

/// The directory calling: its tenant, the token's id (the actor of every admin-log row), and
/// where the tenant's resources live.
pub struct ScimCtx {
    pub tenant: crate::ids::TenantId,
    pub audit: Audit,
    pub base: Base,
}

impl FromRequestParts<AppState> for ScimCtx {
    type Rejection = ScimError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ScimResult<ScimCtx> {
        let unauthorized = || ScimError::status(401, "a SCIM bearer token of this tenant is required");
        let raw = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(unauthorized)?;
        let (token_tenant, token_id) = scim::authenticate(&state.db, raw).await?.ok_or_else(unauthorized)?;
        // The tenant is the path's first parameter; another tenant's path answers 404, like
        // a missing tenant.
        let slug = parts.uri.path().strip_prefix("/scim/v2/t/").and_then(|p| p.split('/').next()).unwrap_or_default();
        let tenant = match tenants::by_slug(&state.db, slug).await {
            Ok(t) if t.id == token_tenant => t,
            Ok(_) | Err(Error::NotFound { .. }) => return Err(ScimError::status(404, "tenant not found")),
            Err(e) => return Err(e.into()),
        };
        if tenant.status != Status::Active {
            return Err(ScimError::status(403, format!("this tenant is {}", tenant.status.as_str())));
        }
        tracing::Span::current().record("tenant_id", tracing::field::display(tenant.id.0));
        let audit = Audit { actor: format!("scim_token:{token_id}"), request_id: request_id(&parts.headers) };
        let base = Base(format!("{}/scim/v2/t/{}", state.config.public_url.trim_end_matches('/'), tenant.slug));
        Ok(ScimCtx { tenant: tenant.id, audit, base })
    }
}

/// A JSON body sent as `application/scim+json` (or `application/json`).
pub struct ScimBody(pub Value);

impl FromRequest<AppState> for ScimBody {
    type Rejection = ScimError;

    async fn from_request(req: Request, state: &AppState) -> ScimResult<ScimBody> {
        let ok_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
            .is_some_and(|t| t == SCIM_JSON || t == "application/json");
        if !ok_type {
            return Err(ScimError::status(415, "send Content-Type: application/scim+json"));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ScimError::status(413, "request body too large")
            } else {
                ScimError::syntax("the request body could not be read")
            }
        })?;
        let value = serde_json::from_slice(&bytes).map_err(|_| ScimError::syntax("the request body is not JSON"))?;
        Ok(ScimBody(value))
    }
}

/// The query of a list or a get; one that cannot be read (a parameter given twice, bad
/// percent-encoding) is a SCIM error, not axum's plain-text rejection.
struct ScimQuery(ListParams);

impl FromRequestParts<AppState> for ScimQuery {
    type Rejection = ScimError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ScimResult<ScimQuery> {
        let Query(p) = Query::<ListParams>::from_request_parts(parts, state)
            .await
            .map_err(|_| ScimError::syntax("the query string could not be read (is a parameter given twice?)"))?;
        Ok(ScimQuery(p))
    }
}

fn resource_id(raw: &str) -> ScimResult<Uuid> {
    raw.parse().map_err(|_| ScimError::status(404, "resource not found"))
}

#[derive(Deserialize, Default)]
struct ListParams {
    filter: Option<String>,
    #[serde(rename = "startIndex")]
    start_index: Option<String>,
    count: Option<String>,
    attributes: Option<String>,
    #[serde(rename = "excludedAttributes")]
    excluded_attributes: Option<String>,
    #[serde(rename = "sortBy")]
    sort_by: Option<String>,
}

impl ListParams {
    fn query(&self, kind: ResourceKind) -> ScimResult<ListQuery> {
        if self.sort_by.is_some() {
            return Err(ScimError::status(501, "sorting is not supported"));
        }
        ListQuery::parse(
            kind,
            self.filter.as_deref(),
            self.start_index.as_deref(),
            self.count.as_deref(),
            self.attributes.as_deref(),
            self.excluded_attributes.as_deref(),
        )
    }

    /// A `.search` body (RFC 7644 §3.4.3): the same parameters as members of a
    /// `SearchRequest`; attribute lists may be JSON lists.
    fn from_search(body: &Value) -> ScimResult<ListParams> {
        let Value::Object(o) = body else { return Err(ScimError::syntax("a SearchRequest is a JSON object")) };
        let mut p = ListParams::default();
        for (k, v) in o {
            let text = || -> ScimResult<Option<String>> {
                Ok(match v {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    Value::Array(items) => Some(
                        items
                            .iter()
                            .map(|i| {
                                i.as_str()
                                    .map(str::to_owned)
                                    .ok_or_else(|| ScimError::syntax(format!("'{k}' holds a non-string")))
                            })
                            .collect::<ScimResult<Vec<_>>>()?
                            .join(","),
                    ),
                    _ => return Err(ScimError::syntax(format!("'{k}' has the wrong type"))),
                })
            };
            match k.as_str() {
                "schemas" => {}
                "filter" => p.filter = text()?,
                "startIndex" => p.start_index = text()?,
                "count" => p.count = text()?,
                "attributes" => p.attributes = text()?,
                "excludedAttributes" => p.excluded_attributes = text()?,
                "sortBy" => p.sort_by = text()?,
                "sortOrder" => {}
                _ => return Err(ScimError::syntax(format!("unknown member '{}' of a SearchRequest", schema::clip(k)))),
            }
        }
        Ok(p)
    }
}

fn projection(kind: ResourceKind, p: &ListParams) -> Projection {
    Projection::new(kind, p.attributes.as_deref(), p.excluded_attributes.as_deref())
}

fn created(doc: Value) -> Response {
    let location = doc["meta"]["location"].as_str().and_then(|l| HeaderValue::from_str(l).ok());
    let mut r = scim_json(doc);
    *r.status_mut() = StatusCode::CREATED;
    if let Some(l) = location {
        r.headers_mut().insert(header::LOCATION, l);
    }
    r
}

async fn list_users(ctx: ScimCtx, State(state): State<AppState>, ScimQuery(p): ScimQuery) -> ScimResult<Response> {
    let q = p.query(ResourceKind::User)?;
    Ok(scim_json(scim::list_users(&state.db, ctx.tenant, &ctx.base, &q).await?))
}

async fn search_users(ctx: ScimCtx, State(state): State<AppState>, ScimBody(body): ScimBody) -> ScimResult<Response> {
    let q = ListParams::from_search(&body)?.query(ResourceKind::User)?;
    Ok(scim_json(scim::list_users(&state.db, ctx.tenant, &ctx.base, &q).await?))
}

async fn create_user(ctx: ScimCtx, State(state): State<AppState>, ScimBody(body): ScimBody) -> ScimResult<Response> {
    Ok(created(scim::create_user(&state.db, ctx.tenant, &ctx.audit, &ctx.base, &body).await?))
}

async fn get_user(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ScimQuery(p): ScimQuery,
) -> ScimResult<Response> {
    let proj = projection(ResourceKind::User, &p);
    Ok(scim_json(scim::get_user(&state.db, ctx.tenant, &ctx.base, resource_id(&id)?, &proj).await?))
}

async fn replace_user(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ScimBody(body): ScimBody,
) -> ScimResult<Response> {
    Ok(scim_json(scim::replace_user(&state.db, ctx.tenant, &ctx.audit, &ctx.base, resource_id(&id)?, &body).await?))
}

async fn patch_user(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ScimBody(body): ScimBody,
) -> ScimResult<Response> {
    Ok(scim_json(scim::patch_user(&state.db, ctx.tenant, &ctx.audit, &ctx.base, resource_id(&id)?, &body).await?))
}

async fn delete_user(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> ScimResult<StatusCode> {
    scim::delete_user(&state.db, ctx.tenant, &ctx.audit, resource_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_groups(ctx: ScimCtx, State(state): State<AppState>, ScimQuery(p): ScimQuery) -> ScimResult<Response> {
    let q = p.query(ResourceKind::Group)?;
    Ok(scim_json(scim::list_groups(&state.db, ctx.tenant, &ctx.base, &q).await?))
}

async fn search_groups(ctx: ScimCtx, State(state): State<AppState>, ScimBody(body): ScimBody) -> ScimResult<Response> {
    let q = ListParams::from_search(&body)?.query(ResourceKind::Group)?;
    Ok(scim_json(scim::list_groups(&state.db, ctx.tenant, &ctx.base, &q).await?))
}

async fn create_group(ctx: ScimCtx, State(state): State<AppState>, ScimBody(body): ScimBody) -> ScimResult<Response> {
    Ok(created(scim::create_group(&state.db, ctx.tenant, &ctx.audit, &ctx.base, &body).await?))
}

async fn get_group(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ScimQuery(p): ScimQuery,
) -> ScimResult<Response> {
    let proj = projection(ResourceKind::Group, &p);
    Ok(scim_json(scim::get_group(&state.db, ctx.tenant, &ctx.base, resource_id(&id)?, &proj).await?))
}

async fn replace_group(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ScimBody(body): ScimBody,
) -> ScimResult<Response> {
    Ok(scim_json(scim::replace_group(&state.db, ctx.tenant, &ctx.audit, &ctx.base, resource_id(&id)?, &body).await?))
}

async fn patch_group(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ScimBody(body): ScimBody,
) -> ScimResult<Response> {
    Ok(scim_json(scim::patch_group(&state.db, ctx.tenant, &ctx.audit, &ctx.base, resource_id(&id)?, &body).await?))
}

async fn delete_group(
    ctx: ScimCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> ScimResult<StatusCode> {
    scim::delete_group(&state.db, ctx.tenant, &ctx.audit, resource_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// RFC 7644 §5: what this service provider supports.
async fn service_provider_config(ctx: ScimCtx) -> Response {
    let unsupported = json!({ "supported": false });
    scim_json(json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"],
        "documentationUri": "https://datatracker.ietf.org/doc/html/rfc7644",
        "patch": { "supported": true },
        "bulk": { "supported": false, "maxOperations": 0, "maxPayloadSize": 0 },
        "filter": { "supported": true, "maxResults": scim::MAX_PAGE },
        "changePassword": unsupported,
        "sort": unsupported,
        "etag": unsupported,
        "authenticationSchemes": [{
            "type": "oauthbearertoken",
            "name": "SCIM bearer token",
            "description": "A SCIM token minted by a tenant admin (gatehouse scim token create)",
            "primary": true,
        }],
        "meta": { "resourceType": "ServiceProviderConfig", "location": format!("{}/ServiceProviderConfig", ctx.base.0) },
    }))
}

fn resource_type(base: &Base, kind: ResourceKind) -> Value {
    json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ResourceType"],
        "id": kind.name(),
        "name": kind.name(),
        "endpoint": format!("/{}", kind.endpoint()),
        "description": kind.name(),
        "schema": kind.urn(),
        "meta": { "resourceType": "ResourceType", "location": format!("{}/ResourceTypes/{}", base.0, kind.name()) },
    })
}

fn listed(items: Vec<Value>) -> Response {
    scim_json(json!({
        "schemas": [scim::LIST_URN],
        "totalResults": items.len(),
        "itemsPerPage": items.len(),
        "startIndex": 1,
        "Resources": items,
    }))
}

async fn resource_types(ctx: ScimCtx) -> Response {
    listed([ResourceKind::User, ResourceKind::Group].into_iter().map(|k| resource_type(&ctx.base, k)).collect())
}

async fn one_resource_type(ctx: ScimCtx, Path((_, id)): Path<(String, String)>) -> ScimResult<Response> {
    [ResourceKind::User, ResourceKind::Group]
        .into_iter()
        .find(|k| k.name() == id)
        .map(|k| scim_json(resource_type(&ctx.base, k)))
        .ok_or_else(|| ScimError::status(404, "no such resource type"))
}

fn schema_doc(base: &Base, doc: &Value) -> Value {
    let mut doc = doc.clone();
    let id = doc["id"].as_str().unwrap_or_default().to_owned();
    doc["meta"] = json!({ "resourceType": "Schema", "location": format!("{}/Schemas/{id}", base.0) });
    doc
}

async fn schemas(ctx: ScimCtx) -> Response {
    listed(schema::documents().iter().map(|d| schema_doc(&ctx.base, d)).collect())
}

async fn one_schema(ctx: ScimCtx, Path((_, id)): Path<(String, String)>) -> ScimResult<Response> {
    schema::documents()
        .iter()
        .find(|d| d["id"] == id)
        .map(|d| scim_json(schema_doc(&ctx.base, d)))
        .ok_or_else(|| ScimError::status(404, "no such schema"))
}

/// `POST /.search` across resource types is not offered (RFC 7644 §3.4.3 allows that).
async fn search_all(_ctx: ScimCtx) -> ScimError {
    ScimError::status(501, "search one resource type at a time: /Users/.search or /Groups/.search")
}

async fn unknown(_ctx: ScimCtx) -> ScimError {
    ScimError::status(404, "no such SCIM endpoint")
}

async fn method_not_allowed() -> ScimError {
    ScimError::status(405, "method not allowed here")
}

fn only(m: MethodRouter<AppState>) -> MethodRouter<AppState> {
    m.fallback(method_not_allowed)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

/// The tenant's SCIM tokens (never their secrets); owners and admins.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/scim-tokens", tag = "scim", security(("session" = [])),
    responses((status = 200, body = Vec<ScimToken>)))]
async fn list_scim_tokens(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<ScimToken>>> {
    ctx.require_admin()?;
    Ok(Json(scim::list_tokens(&state.db, ctx.tenant.id).await?))
}

/// Mints a SCIM token for the tenant's directory (owners and admins). The secret is in this
/// response and nowhere else, ever.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/scim-tokens", tag = "scim", security(("session" = [])), request_body = NameBody,
    responses((status = 201, body = scim::CreatedToken)))]
async fn create_scim_token(ctx: TenantCtx, State(state): State<AppState>, ApiJson(body): ApiJson<NameBody>) -> Result<Response> {
    ctx.require_admin()?;
    ctx.refuse_impersonation("mint SCIM tokens")?;
    let created = scim::create_token(&state.db, ctx.tenant.id, &ctx.audit, &body.name).await?;
    Ok(no_store((StatusCode::CREATED, Json(created)).into_response()))
}

/// Revokes a SCIM token (idempotent: the revoked token is answered); the directory's next
/// request with it is refused.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/scim-tokens/{id}", tag = "scim", security(("session" = [])),
    responses((status = 200, body = ScimToken)))]
async fn revoke_scim_token(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<ScimToken>> {
    ctx.require_admin()?;
    Ok(Json(scim::revoke_token(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "SCIM token")?).await?))
}

/// The tenant admins' API for SCIM tokens: part of the JSON API and its document.
pub fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_scim_tokens, create_scim_token)).routes(routes!(revoke_scim_token))
}

pub fn router() -> Router<AppState> {
    let t = "/scim/v2/t/{tenant}";
    Router::new()
        .route(&format!("{t}/ServiceProviderConfig"), only(get(service_provider_config)))
        .route(&format!("{t}/ResourceTypes"), only(get(resource_types)))
        .route(&format!("{t}/ResourceTypes/{{id}}"), only(get(one_resource_type)))
        .route(&format!("{t}/Schemas"), only(get(schemas)))
        .route(&format!("{t}/Schemas/{{id}}"), only(get(one_schema)))
        .route(&format!("{t}/Users"), only(get(list_users).post(create_user)))
        .route(&format!("{t}/Users/.search"), only(post(search_users)))
        .route(&format!("{t}/Users/{{id}}"), only(get(get_user).put(replace_user).patch(patch_user).delete(delete_user)))
        .route(&format!("{t}/Groups"), only(get(list_groups).post(create_group)))
        .route(&format!("{t}/Groups/.search"), only(post(search_groups)))
        .route(&format!("{t}/Groups/{{id}}"), only(get(get_group).put(replace_group).patch(patch_group).delete(delete_group)))
        .route(&format!("{t}/.search"), only(post(search_all)))
        .route(&format!("{t}/{{*rest}}"), any(unknown))
}
