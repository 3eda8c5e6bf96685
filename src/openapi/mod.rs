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

mod codes;
use codes::CODES;

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
        .merge(crate::scim::http::api_router())
        .merge(crate::sso::http::api_router())
        .merge(crate::quotas::http::api_router())
        .merge(crate::impersonation::http::router())
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
        .merge(crate::approvals::http::router())
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
                     `tenant_suspended`; `sso_required` (a session of another sign-in, where the tenant requires its SSO)"
                } else {
                    "`permission_denied`; `person_required` (a machine on a route for people); `tenant_suspended`; \
                     `sso_required` (a session of another sign-in, where the tenant requires its SSO)"
                },
            ),
            ("404", "`not_found`: the tenant or an object of the path does not exist or is another tenant's"),
            ("421", "`tenant_moved`: the tenant lives on another deployment now (`base_url`, `location`)"),
        ]);
    }
    if op.request_body.is_some() {
        statuses.push(("413", "`payload_too_large`: the body is larger than the server accepts"));
    }
    // Two parts of one status are joined into one description (a keyed write with a body).
    if op.request_body.is_some() {
        statuses.push(("422", "`invalid_json` or `unsupported_media_type`: the body is not the JSON asked for"));
    }
    if keyed {
        statuses.push((
            "422",
            "`invalid_idempotency_key` or `idempotency_key_reused` (for a different request in the last 24 hours)",
        ));
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
    let mut joined: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (status, description) in statuses {
        joined.entry(status).or_default().push(description);
    }
    for (status, parts) in joined {
        op.responses.responses.entry(status.into()).or_insert_with(|| problem(&parts.join("; ")));
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
mod tests;
