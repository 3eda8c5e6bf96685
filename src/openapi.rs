//! The OpenAPI 3.1 document of the JSON API (`/api/v1/…`), generated from the handlers'
//! `#[utoipa::path]` annotations and served, unauthenticated, at `/api/v1/openapi.json`.
//!
//! Each noun's `router()` is a `utoipa_axum` router: an API route is added with `routes!`,
//! which takes its method and path from the handler's annotation, so the route the server
//! answers and the operation the document describes are one registry. Pages, OAuth
//! redirects and the MCP endpoint are added with plain `.route()` and stay out of the
//! document (docs/decisions.md). The conventions every operation shares (security schemes,
//! the problem responses a route can answer through the shared extractors and layers) are
//! applied once here by [`Conventions`]; what only one route can answer is in its annotation.

use std::sync::LazyLock;

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use utoipa::{
    Modify, OpenApi,
    openapi::{
        self, Content, HttpMethod, Ref, RefOr, Required,
        path::{Operation, ParameterBuilder, ParameterIn},
        response::ResponseBuilder,
        schema::{ObjectBuilder, Type},
        security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme},
    },
};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    AppState,
    error::{FieldIssue, PROBLEM_JSON, Problem},
};

/// Where the document is served.
pub const PATH: &str = "/api/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gatehouse API",
        description = "The JSON API of Gatehouse, a multi-tenant MCP gateway. Every error is \
                       `application/problem+json` with a stable `code`. The MCP endpoint \
                       (`/t/{tenant}/w/{workspace}/mcp`), the console and the OAuth browser \
                       pages are not part of this document.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    components(schemas(Problem, FieldIssue), responses(Problem)),
    modifiers(&Conventions)
)]
struct Base;

/// The JSON API's routes: every noun's router. Pages that live beside a noun's API routes
/// come along (undocumented); the root router adds the rest and the middleware.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(Base::openapi())
        .routes(routes!(document))
        .merge(crate::oidc::http::router())
        .merge(crate::tenants::http::router())
        .merge(crate::members::http::router())
        .merge(crate::tokens::http::router())
        .merge(crate::service_credentials::http::router())
        .merge(crate::kv::http::router())
        .merge(crate::workspaces::http::router())
        .merge(crate::forks::http::router())
        .merge(crate::copies::http::router())
        .merge(crate::snapshots::http::router())
        .merge(crate::workspaces::lifecycle::http::router())
        .merge(crate::blueprints::http::router())
        .merge(crate::erasure::http::router())
        .merge(crate::reap::http::router())
        .merge(crate::peers::http::router())
        .merge(crate::vault::http::router())
        .merge(crate::connect_links::http::router())
        .merge(crate::oauth::http::router())
        .merge(crate::mcp_auth::http::router())
        .merge(crate::gateway::activity::http::router())
        .merge(crate::gateway::pins::http::router())
        .merge(crate::findings::http::router())
        .merge(crate::reports::http::router())
        .merge(crate::ops::http::router())
}

/// The document, with the shared conventions applied.
pub fn build() -> openapi::OpenApi {
    let mut doc = routes().into_openapi();
    Conventions.modify(&mut doc);
    doc
}

/// Built once per process: the routes do not change while it runs.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| serde_json::to_string(&build()).unwrap_or_default());

/// This document: the OpenAPI 3.1 description of the JSON API. Public, like the README.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
async fn document() -> Response {
    let mut r = DOCUMENT.as_str().into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Security schemes and the problem answers that every route shares.
struct Conventions;

const SESSION: &str = "session";
const CSRF: &str = "csrf";
const MACHINE_ID: &str = "machineClientId";
const MACHINE_SECRET: &str = "machineClientSecret";
const MACHINE_TOKEN: &str = "machineToken";
const OAUTH: &str = "oauthBearer";

impl Modify for Conventions {
    fn modify(&self, doc: &mut openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let schemes = [
            (
                SESSION,
                SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                    "gh_session",
                    "A person's browser session (sign in at `/login`). The cookie is `__Host-gh_session` \
                     when the public URL is https. Mutating requests also need `X-CSRF-Token` and the \
                     same-origin `Origin`.",
                ))),
            ),
            (
                CSRF,
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    "X-CSRF-Token",
                    "The session's CSRF token (shown on `GET /api/v1/me`), required with the session \
                     cookie on every mutating request.",
                ))),
            ),
            (
                MACHINE_ID,
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    "Gatehouse-Client-Id",
                    "A machine: the service credential's client id (`gsc_…`), always with its secret and \
                     an access token of the same tenant.",
                ))),
            ),
            (
                MACHINE_SECRET,
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                    "Gatehouse-Client-Secret",
                    "A machine: the service credential's secret (`gss_…`).",
                ))),
            ),
            (
                MACHINE_TOKEN,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("gth_…")
                        .description(Some("A machine: an access token (`gth_…`) presented with a service credential."))
                        .build(),
                ),
            ),
            (
                OAUTH,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("OAuth 2.1 access token")
                        .description(Some(
                            "An OAuth access token issued by the tenant's authorization server \
                             (`/.well-known/oauth-authorization-server/t/{tenant}`) to an MCP client. \
                             It is accepted by the MCP endpoint only, not by the JSON API: no operation \
                             here lists it.",
                        ))
                        .build(),
                ),
            ),
        ];
        for (name, scheme) in schemes {
            components.security_schemes.insert(name.into(), RefOr::T(scheme));
        }
        let mut paths = std::mem::take(&mut doc.paths.paths);
        for (path, item) in &mut paths {
            for method in [HttpMethod::Get, HttpMethod::Put, HttpMethod::Post, HttpMethod::Delete, HttpMethod::Patch] {
                if let Some(op) = operation(item, &method) {
                    conventions(path, &method, op);
                }
            }
        }
        doc.paths.paths = paths;
    }
}

fn operation<'a>(item: &'a mut openapi::PathItem, method: &HttpMethod) -> Option<&'a mut Operation> {
    match method {
        HttpMethod::Get => item.get.as_mut(),
        HttpMethod::Put => item.put.as_mut(),
        HttpMethod::Post => item.post.as_mut(),
        HttpMethod::Delete => item.delete.as_mut(),
        HttpMethod::Patch => item.patch.as_mut(),
        _ => None,
    }
}

/// One operation's shared security and problem answers. An annotation that states its own
/// security (`security(...)`) keeps it, with the CSRF header added to the session on writes.
fn conventions(path: &str, method: &HttpMethod, op: &mut Operation) {
    let write = !matches!(method, HttpMethod::Get);
    let public = op.security.as_ref().is_some_and(|s| s.iter().all(|r| *r == SecurityRequirement::default()));
    if !public {
        let session = if write {
            SecurityRequirement::new(SESSION, [""; 0]).add(CSRF, [""; 0])
        } else {
            SecurityRequirement::new(SESSION, [""; 0])
        };
        let machine = SecurityRequirement::new(MACHINE_ID, [""; 0]).add(MACHINE_SECRET, [""; 0]).add(MACHINE_TOKEN, [""; 0]);
        let stated = op.security.take();
        op.security = Some(match stated {
            // `security(("session" = []))`: people only.
            Some(reqs) if reqs.iter().all(|r| *r == SecurityRequirement::new(SESSION, [""; 0])) => vec![session],
            Some(reqs) => reqs,
            None => vec![session, machine],
        });
    }
    // A write under a tenant may carry an `Idempotency-Key` (crate::idempotency).
    let keyed = write && path.starts_with("/api/v1/tenants/");
    let mut statuses: Vec<(&str, &str)> = vec![
        ("400", "`bad_request`: the path or query could not be read"),
        ("408", "`timeout`: the request took longer than the server's deadline"),
        ("500", "`internal`: a fault of the server, logged with the request id"),
    ];
    // Reads run in transactions too: a connection lost during any commit is answered so.
    statuses.push((
        "503",
        "Retryable, after `retryAfterMs`: `database_unavailable`, `database_read_only` or `contention`; or \
         `database_commit_unknown`: the connection was lost during the commit (a write's change may or may not \
         have been saved: retry with the same `Idempotency-Key` to find out)",
    ));
    if !public {
        statuses.extend([
            ("401", "`unauthorized`: no valid session cookie or machine credentials"),
            (
                "403",
                if write {
                    "`permission_denied`; `person_required` (a machine on a route for people); `origin_mismatch` or \
                     `csrf_failed` (a browser's write without the same `Origin` or the session's `X-CSRF-Token`); \
                     `tenant_suspended`"
                } else {
                    "`permission_denied`; `person_required` (a machine on a route for people); `tenant_suspended`"
                },
            ),
            ("404", "`not_found`: the tenant or an object of the path does not exist or is another tenant's"),
            ("421", "`tenant_moved`: the tenant lives on another deployment now (`base_url`, `location`)"),
        ]);
    }
    if op.request_body.is_some() {
        statuses.push(("413", "`payload_too_large`: the body is larger than the server accepts"));
    }
    match (op.request_body.is_some(), keyed) {
        (true, true) => statuses.push((
            "422",
            "`invalid_json` or `unsupported_media_type`: the body is not the JSON asked for; \
             `invalid_idempotency_key` or `idempotency_key_reused` (for a different request in the last 24 hours)",
        )),
        (true, false) => statuses.push(("422", "`invalid_json` or `unsupported_media_type`: the body is not the JSON asked for")),
        (false, true) => statuses.push((
            "422",
            "`invalid_idempotency_key` or `idempotency_key_reused` (for a different request in the last 24 hours)",
        )),
        (false, false) => {}
    }
    if keyed {
        statuses.push((
            "409",
            "A retry with the same `Idempotency-Key`: `idempotency_key_in_progress` (the first is still running), \
             `idempotency_answer_lost` (it was carried out, its answer lost) or `idempotency_answer_withheld` (its \
             answer held a secret, shown only once)",
        ));
    }
    path_parameters(path, op);
    // OpenAPI requires a description on every response; the annotations give the body only.
    for (status, response) in op.responses.responses.iter_mut() {
        if let RefOr::T(response) = response
            && response.description.is_empty()
        {
            response.description = match status.as_str() {
                "201" => "Created",
                "204" => "No content",
                _ => "OK",
            }
            .into();
        }
    }
    for (status, description) in statuses {
        op.responses.responses.entry(status.into()).or_insert_with(|| problem(description));
    }
    let method = serde_json::to_value(method).ok();
    let method = method.as_ref().and_then(|m| m.as_str()).unwrap_or_default();
    for (_, _, status, codes) in CODES.iter().filter(|(m, p, _, _)| *m == method && *p == path) {
        let listed = codes.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ");
        match op.responses.responses.entry(status.to_string()) {
            std::collections::btree_map::Entry::Occupied(mut e) => match e.get_mut() {
                RefOr::T(r) => r.description = format!("{}; this operation's own: {listed}", r.description),
                // `response = Problem` in the annotation: the status alone, now with its codes.
                shared @ RefOr::Ref(_) => *shared = problem(&format!("This operation's problems: {listed}")),
            },
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(problem(&format!("This operation's problems: {listed}")));
            }
        }
    }
}

/// The problem codes particular to an operation, by status, beyond the shared ones that
/// [`conventions`] names for every route (method, path, status, codes). The suite checks
/// every problem a server answers against this document (tests/common/codes.rs), so a code
/// that a route answers in a test and that is missing here fails that test.
#[rustfmt::skip]
const CODES: &[(&str, &str, u16, &[&str])] = &[
    ("get", "/api/v1/platform/issues", 403, &["platform_admin_required"]),
    ("get", "/api/v1/platform/issues", 422, &["invalid_status"]),
    ("post", "/api/v1/platform/issues/{fingerprint}/verdict", 403, &["platform_admin_required"]),
    ("post", "/api/v1/platform/issues/{fingerprint}/verdict", 422, &["invalid_verdict", "invalid_version", "version_without_resolve"]),
    ("get", "/api/v1/platform/reports", 403, &["platform_admin_required"]),
    ("get", "/api/v1/platform/reports/{name}", 403, &["platform_admin_required"]),
    ("get", "/api/v1/tenants/{tenant}/activity", 422, &["invalid_cursor", "invalid_limit", "invalid_outcome"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints", 409, &["slug_taken"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints", 422, &["invalid_name", "invalid_slug"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions", 409, &["vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions", 412, &["blueprint_changed"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions", 422, &["invalid_config"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions/{version}/admit", 409, &["already_decided"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions/{version}/admit", 422, &["invalid_reason"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions/{version}/reject", 409, &["already_decided"]),
    ("post", "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions/{version}/reject", 422, &["invalid_reason"]),
    ("get", "/api/v1/tenants/{tenant}/findings", 422, &["invalid_status"]),
    ("post", "/api/v1/tenants/{tenant}/findings/{id}/ack", 409, &["invalid_transition"]),
    ("post", "/api/v1/tenants/{tenant}/findings/{id}/resolve", 409, &["invalid_transition"]),
    ("post", "/api/v1/tenants/{tenant}/invitations", 409, &["invitation_outstanding"]),
    ("post", "/api/v1/tenants/{tenant}/invitations", 422, &["invalid_email"]),
    ("delete", "/api/v1/tenants/{tenant}/invitations/{id}", 409, &["invitation_consumed"]),
    ("get", "/api/v1/tenants/{tenant}/kv", 422, &["invalid_limit", "invalid_prefix"]),
    ("post", "/api/v1/tenants/{tenant}/kv-cas", 412, &["precondition_failed"]),
    ("post", "/api/v1/tenants/{tenant}/kv-cas", 422, &["invalid_expect", "invalid_key", "invalid_next", "invalid_ttl", "value_too_large"]),
    ("get", "/api/v1/tenants/{tenant}/kv/{key}", 422, &["invalid_key"]),
    ("put", "/api/v1/tenants/{tenant}/kv/{key}", 422, &["invalid_key", "invalid_ttl", "value_too_large"]),
    ("delete", "/api/v1/tenants/{tenant}/kv/{key}", 422, &["invalid_key"]),
    ("delete", "/api/v1/tenants/{tenant}/mcp-clients/{id}", 503, &["replicas_unconfirmed"]),
    ("get", "/api/v1/tenants/{tenant}/mcp-grants", 422, &["invalid_scope"]),
    ("delete", "/api/v1/tenants/{tenant}/mcp-grants/{id}", 503, &["replicas_unconfirmed"]),
    ("delete", "/api/v1/tenants/{tenant}/members/{id}", 409, &["last_owner"]),
    ("delete", "/api/v1/tenants/{tenant}/members/{id}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/service-credentials", 422, &["invalid_name"]),
    ("delete", "/api/v1/tenants/{tenant}/service-credentials/{id}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/snapshots/{file}/restore", 409, &["credential_unreadable", "slug_taken", "vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/snapshots/{file}/restore", 412, &["copy_lease_lost", "erasure_epoch_changed", "workspace_reaping"]),
    ("post", "/api/v1/tenants/{tenant}/snapshots/{file}/restore", 422, &["invalid_slug"]),
    ("post", "/api/v1/tenants/{tenant}/snapshots/{file}/restore", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/suppress-rules", 422, &["invalid_expiry", "invalid_kind", "invalid_matcher", "invalid_reason", "rule_matches_everything"]),
    ("post", "/api/v1/tenants/{tenant}/tokens", 409, &["token_cap_reached"]),
    ("post", "/api/v1/tenants/{tenant}/tokens", 422, &["invalid_name"]),
    ("patch", "/api/v1/tenants/{tenant}/tokens/{id}", 422, &["invalid_name"]),
    ("delete", "/api/v1/tenants/{tenant}/tokens/{id}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces", 409, &["slug_taken"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces", 422, &["invalid_name", "invalid_slug"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/activate", 409, &["invalid_transition", "reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/activate", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/archive", 409, &["invalid_transition", "reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/archive", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/bind", 409, &["reaping", "version_not_admitted", "workspace_not_bindable"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/bind", 412, &["binding_changed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/bind", 503, &["replicas_unconfirmed"]),
    ("patch", "/api/v1/tenants/{tenant}/workspaces/{workspace}/config", 409, &["workspace_not_active"]),
    ("patch", "/api/v1/tenants/{tenant}/workspaces/{workspace}/config", 412, &["binding_changed"]),
    ("patch", "/api/v1/tenants/{tenant}/workspaces/{workspace}/config", 422, &["invalid_config"]),
    ("patch", "/api/v1/tenants/{tenant}/workspaces/{workspace}/config", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", 409, &["connector_exists", "vault_disabled", "workspace_not_active"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", 412, &["binding_changed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", 422, &["invalid_config"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", 503, &["replicas_unconfirmed"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", 409, &["workspace_not_active"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", 412, &["binding_changed"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", 422, &["invalid_config"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/connect-links", 409, &["not_oauth_shared", "oauth_client_credentials", "vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/connect-links", 422, &["invalid_email", "invalid_ttl"]),
    ("get", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", 409, &["slot_mismatch"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", 409, &["slot_mismatch", "vault_disabled"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", 422, &["invalid_config"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", 503, &["replicas_unconfirmed"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", 409, &["slot_mismatch", "vault_disabled"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}/test", 409, &["auth_required", "credential_unreadable", "slot_mismatch", "vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}/test", 503, &["downstream_error", "unavailable"]),
    ("get", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", 409, &["not_confidential", "vault_disabled"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", 409, &["not_confidential", "vault_disabled"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", 422, &["invalid_client_secret", "invalid_private_key"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", 503, &["replicas_unconfirmed"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", 409, &["not_confidential", "vault_disabled"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/client-secret", 503, &["replicas_unconfirmed"]),
    ("get", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}", 409, &["not_oauth", "slot_mismatch"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}", 409, &["not_oauth", "slot_mismatch", "vault_disabled"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/{grant}/connect", 409, &["not_oauth", "oauth_client_credentials", "slot_mismatch", "vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/refresh", 409, &["auth_required", "credential_unreadable", "oauth_client_secret_missing", "vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/refresh", 503, &["downstream_error", "unavailable"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/erase", 412, &["erasure_retry_later"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/erase", 422, &["invalid_subject"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/erase", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork", 409, &["slug_taken", "workspace_not_active"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork", 412, &["copy_lease_lost", "erasure_epoch_changed", "workspace_reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork", 422, &["invalid_hours", "invalid_slug"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/extend", 409, &["not_a_fork"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/extend", 422, &["invalid_hours"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/extend", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/pin", 409, &["not_a_fork"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/pin", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/unpin", 409, &["not_a_fork"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/unpin", 503, &["replicas_unconfirmed"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/peers/{connector}", 409, &["not_a_peer", "peer_cycle", "target_not_active"]),
    ("put", "/api/v1/tenants/{tenant}/workspaces/{workspace}/peers/{connector}", 503, &["replicas_unconfirmed"]),
    ("delete", "/api/v1/tenants/{tenant}/workspaces/{workspace}/peers/{connector}", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/reap", 409, &["invalid_transition", "reap_in_progress"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/reap", 412, &["reap_retry_later"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/reap", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/resume", 409, &["invalid_transition", "reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/resume", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/snapshots", 409, &["credential_unreadable", "vault_disabled"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/snapshots", 412, &["copy_lease_lost", "erasure_epoch_changed", "workspace_reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/suspend", 409, &["invalid_transition", "reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/suspend", 503, &["replicas_unconfirmed"]),
    ("get", "/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins", 422, &["invalid_status"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins/{connector}/{tool}/approve", 409, &["pin_not_quarantined"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins/{connector}/{tool}/approve", 412, &["pin_changed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins/{connector}/{tool}/approve", 503, &["replicas_unconfirmed"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/unarchive", 409, &["invalid_transition", "reaping"]),
    ("post", "/api/v1/tenants/{tenant}/workspaces/{workspace}/unarchive", 503, &["replicas_unconfirmed"]),
];

/// Declares each `{name}` of the path that the annotation did not: a string, required.
fn path_parameters(path: &str, op: &mut Operation) {
    let params = op.parameters.get_or_insert_with(Vec::new);
    let declared: Vec<String> = params
        .iter()
        .filter_map(|p| match p {
            RefOr::T(p) if p.parameter_in == ParameterIn::Path => Some(p.name.clone()),
            _ => None,
        })
        .collect();
    let names = path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')));
    for (i, name) in names.enumerate() {
        if declared.iter().any(|d| d == name) {
            continue;
        }
        let description = match name {
            "tenant" => "The tenant's slug",
            "workspace" => "The workspace's name",
            _ => "A path segment of this route",
        };
        let param = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(description))
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .build();
        params.insert(i.min(params.len()), RefOr::T(param));
    }
}

fn problem(description: &str) -> RefOr<openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(PROBLEM_JSON, Content::new(Some(Ref::from_schema_name("Problem"))))
            .build(),
    )
}

/// The JSON API as the routers built it: path → methods, read from the router itself.
#[cfg(test)]
pub(crate) fn routed(router: &axum::Router<AppState>) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    // axum keeps its route table private; its `Debug` output lists every path with its id
    // and every id with the handler of each method, which is what this test needs.
    let text = format!("{router:?}");
    let methods = regex::Regex::new(
        r"RouteId\((\d+)\): MethodRouter\(MethodRouter \{ get: (\w+), head: \w+, delete: (\w+), options: \w+, patch: (\w+), post: (\w+), put: (\w+),",
    )
    .unwrap();
    let paths = regex::Regex::new(r#"RouteId\((\d+)\): "([^"]*)""#).unwrap();
    let mut by_id = std::collections::BTreeMap::new();
    for c in methods.captures_iter(&text) {
        let mut set = std::collections::BTreeSet::new();
        for (i, name) in [(2, "get"), (3, "delete"), (4, "patch"), (5, "post"), (6, "put")] {
            if &c[i] != "None" {
                set.insert(name.to_owned());
            }
        }
        by_id.insert(c[1].to_owned(), set);
    }
    let mut out = std::collections::BTreeMap::new();
    for c in paths.captures_iter(&text) {
        out.insert(c[2].to_owned(), by_id.remove(&c[1]).unwrap_or_default());
    }
    assert!(by_id.is_empty(), "every route id has a path: {by_id:?}");
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    #[test]
    fn every_json_api_route_is_in_the_document_and_nothing_else() {
        let (router, _) = routes().split_for_parts();
        let routed: BTreeMap<String, BTreeSet<String>> =
            routed(&router).into_iter().filter(|(path, _)| path.starts_with("/api/")).collect();
        assert!(routed.len() > 50, "the route table was read: {routed:?}");
        let doc = serde_json::to_value(build()).unwrap();
        let documented: BTreeMap<String, BTreeSet<String>> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(path, item)| (path.clone(), item.as_object().unwrap().keys().cloned().collect()))
            .collect();
        assert_eq!(routed, documented, "every /api/ route and method is documented, and only those");
    }

    #[test]
    fn the_route_reader_sees_an_undocumented_route() {
        // The check above fails when someone adds a route without an annotation.
        let (router, _) = routes().route("/api/v1/undocumented", axum::routing::get(|| async {})).split_for_parts();
        let routed = routed(&router);
        assert_eq!(routed.get("/api/v1/undocumented"), Some(&BTreeSet::from(["get".to_owned()])));
        assert!(!build().paths.paths.contains_key("/api/v1/undocumented"));
    }

    #[test]
    fn the_document_is_openapi_3_1_with_problem_answers() {
        let doc = serde_json::to_value(build()).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
        let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
        for name in [SESSION, CSRF, MACHINE_ID, MACHINE_SECRET, MACHINE_TOKEN, OAUTH] {
            assert!(schemes.contains_key(name), "{name}");
        }
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let responses = op["responses"].as_object().unwrap();
                assert!(responses.contains_key("500"), "{method} {path}");
                if path.starts_with("/api/v1/tenants/") {
                    for status in ["401", "403", "404"] {
                        assert!(responses.contains_key(status), "{method} {path} {status}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_row_of_the_code_table_names_an_operation_and_lists_its_codes() {
        let doc = serde_json::to_value(build()).unwrap();
        for (method, path, status, codes) in CODES {
            let description = doc["paths"][path][method]["responses"][status.to_string()]["description"].as_str();
            let description = description.unwrap_or_else(|| panic!("{method} {path} {status} is an operation's answer"));
            for code in *codes {
                assert!(description.contains(&format!("`{code}`")), "{method} {path} {status}: {description}");
            }
        }
    }

    /// Codes the source gives problems (the shapes `code: "…"`, `invalid("…"` and
    /// `problem(StatusCode::…, "…"`) that the JSON API cannot answer: they belong to the MCP
    /// endpoint, the OAuth and sign-in endpoints, the console's pages, the CLI or startup, or
    /// never reach a client (recorded as an ops failure or a finding, or replaced on the way).
    const OUTSIDE_THE_API: &[&str] = &[
        "authorization_denied",
        "client_revoked",
        "credential_refused",
        "cross_site_request",
        "destination_written",
        "export_already_imported",
        "export_digest_mismatch",
        "export_format_unsupported",
        "export_integrity",
        "export_invalid",
        "export_key_invalid",
        "export_missing",
        "export_schema_mismatch",
        "export_target_unwritable",
        "export_truncated",
        "export_unreadable",
        "flow_claimed",
        "idempotency_key_replayed",
        "illegal_transition",
        "invalid_base_url",
        "invalid_callback",
        "invalid_client",
        "invalid_client_metadata",
        "invalid_database_url",
        "invalid_filter",
        "invalid_format",
        "invalid_grant",
        "invalid_id_token",
        "invalid_link",
        "invalid_override",
        "invalid_permission",
        "invalid_redirect_uri",
        "invalid_request",
        "invalid_role",
        "invalid_state",
        "invalid_target",
        "invalid_time",
        "issuer_mismatch",
        "link_expired",
        "machine_credentials_required",
        "membership_fenced",
        "missing_code",
        "missing_state",
        "missing_value",
        "moves_unsettled",
        "not_a_member",
        "not_delivered",
        "not_imported",
        "not_ready",
        "not_sealed",
        "oauth_client_auth_unsupported",
        "oauth_discovery_failed",
        "oauth_misconfigured",
        "oauth_registration_failed",
        "oauth_registration_unsupported",
        "oauth_resource_mismatch",
        "provider_error",
        "provider_unavailable",
        "registration_limit",
        "slug_mismatch",
        "status_changed",
        "tenant_exists",
        "tenant_not_exportable",
        "token_exchange_failed",
        "tools_changed",
        "unawaited_calls",
        "unsupported_grant_type",
        "value_on_command_line",
        "verify_failed",
        "workspace_suspended",
        "write_budget_exceeded",
        "wrong_member",
    ];

    #[test]
    fn every_problem_code_in_the_source_is_documented_or_outside_the_api() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        let shape =
            regex::Regex::new(r#"(?:code:\s*|[^_a-z]invalid\(\s*|problem\(\s*StatusCode::[A-Z_]+,\s*)"([a-z0-9_]+)""#).unwrap();
        let mut codes = BTreeSet::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            codes.extend(shape.captures_iter(&text).map(|c| c[1].to_owned()));
        }
        assert!(codes.len() > 100, "the source was read: {codes:?}");
        let doc = serde_json::to_string(&build()).unwrap();
        let missing: Vec<&String> =
            codes.iter().filter(|c| !OUTSIDE_THE_API.contains(&c.as_str()) && !doc.contains(&format!("`{c}`"))).collect();
        assert!(missing.is_empty(), "problem codes in no operation of the document (add them to CODES): {missing:?}");
        let stale: Vec<&&str> =
            OUTSIDE_THE_API.iter().filter(|c| !codes.contains(**c) || doc.contains(&format!("`{c}`"))).collect();
        assert!(stale.is_empty(), "listed as outside the API, yet documented or gone from the source: {stale:?}");
    }
}
