//! The root router: merges the nouns' routers and orders the middleware.

use std::{convert::Infallible, time::Duration};

use axum::{
    Json, Router,
    body::Body,
    extract::{MatchedPath, Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures::{FutureExt, future::Either};
use serde_json::json;
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    compression::CompressionLayer,
    limit::RequestBodyLimitLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    timeout::TimeoutLayer,
    trace::{OnResponse, TraceLayer},
};

use crate::{
    AppState,
    db::migrate,
    error::{Error, ProblemCode, problem},
    extract::REQUEST_ID,
};

/// The whole HTTP service: the routes, and around them the middleware every request passes.
///
/// The layers that need no route run around the router as one plain service, built once: per
/// request it is cloned by value, not boxed. A layer applied with `Router::layer` instead
/// wraps every route in a boxed service that each request clones and boxes again (axum's
/// `Route`), so only the layers that belong after routing are applied that way.
pub fn service(
    state: AppState,
) -> impl tower::Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone + Send + 'static {
    let deadline = Duration::from_millis(state.config.request_timeout_ms);
    // Behind one `Arc`: axum clones a layer's state (and the route holding it) on every
    // request, and a `Db` is six reference counts that every request would bump and drop.
    let db = std::sync::Arc::new(state.db.clone());
    // One endpoint, reached past the router and, for a percent-encoded path, through it.
    let endpoint = crate::gateway::endpoint(&state);
    let past_router = ServiceBuilder::new()
        .map_response(|r: axum::http::Response<_>| r.map(Body::new))
        .layer(route_layers!(state.config.body_limit_bytes, db.clone()))
        .service(endpoint.clone());
    let routes = Split { endpoint: past_router, routes: router(state, db, endpoint) };
    // Outermost first:
    ServiceBuilder::new()
        .map_response(|r: axum::http::Response<_>| r.map(Body::new))
        .layer(axum::extract::DefaultBodyLimit::disable())
        // 1. A request id before anything else, so every log line and response has it.
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        // 2. The request span: request id; the matched route template once routed
        //    ([`record_route`]), the tenant id later still.
        .layer(TraceLayer::new_for_http().make_span_with(request_span).on_response(LogResponse))
        // 3. Echo the id on every response, errors included.
        .layer(PropagateRequestIdLayer::x_request_id())
        // 4. Errors produced by the layers below (413, 408, 405 …) become problem+json,
        //    or SCIM errors under /scim/ (a directory reads only those).
        .layer(tower::layer::layer_fn(BareErrors))
        // 5. A panic answers a bare 500 instead of dropping the connection.
        .layer(CatchPanicLayer::custom(|_| problem(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error", None)))
        // 6. Whole-request deadline.
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, deadline))
        .service(routes)
}

/// The routes, each wrapped in the middleware that runs after routing ([`service`] holds the
/// rest).
fn router(state: AppState, db: std::sync::Arc<crate::db::Db>, endpoint: crate::gateway::Endpoint) -> Router {
    let body_limit = state.config.body_limit_bytes;
    let dev_idp = state.dev_idp.is_some();
    let gateway = crate::gateway::router(endpoint);
    // The JSON API (and the pages that live beside it): one registry with its document.
    let (nouns, _) = crate::openapi::routes().split_for_parts();
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(crate::metrics::router())
        .merge(nouns)
        // SCIM 2.0 (RFC 7644): outside the JSON API and its document, with its own errors.
        .merge(crate::scim::http::router())
        .merge(crate::console::router(&state))
        .merge(gateway);
    if dev_idp {
        app = app.merge(crate::dev_idp::http::router());
    }
    // One `layer` call: axum boxes a route's service once per call, and clones and boxes it
    // again for every request.
    app.fallback(not_found).with_state(state).layer(
        ServiceBuilder::new()
            // The route's template into the request span, first, so that every answer below
            // (a 413 too) is logged with it.
            .map_request(record_route)
            .layer(route_layers!(body_limit, db)),
    )
}

/// The middleware that runs after routing, outermost first, as a `ServiceBuilder`: around
/// every route of [`router`], and around the MCP endpoint that [`Split`] sends past it.
macro_rules! route_layers {
    ($body_limit:expr, $db:expr) => {{
        let db = $db;
        ServiceBuilder::new()
            // 1. Bounded request bodies (checked against Content-Length and while streaming).
            .layer(RequestBodyLimitLayer::new($body_limit))
            // 2. Compressed responses for clients that ask.
            .layer(CompressionLayer::new())
            // The service below takes axum's own body; the limit wraps it.
            .map_request(|r: Request<_>| r.map(Body::new))
            // 3. Around the handlers only, in one service ([`Innermost`]):
            //    a. before any handler or the idempotency store reads the URI, an encoded NUL
            //       is refused (400), since no path segment or query value may hold one;
            //    b. a mutating API call's Idempotency-Key (its answer stored, or a stored one
            //       replayed). Below the body limit and the deadline, so the body it reads is
            //       bounded and a replay waits no longer than any request.
            .layer(tower::layer::layer_fn(move |inner| Innermost { db: db.clone(), inner }))
    }};
}
use route_layers;

/// The routed services: a request for the MCP endpoint (a path that
/// [`crate::extract::EndpointPath`] parses) goes to it directly, every other one to axum's
/// router. The endpoint's calls are the gateway's hot path, and the router's matching, its
/// parameters and its boxed route were a few thousand instructions of each.
#[derive(Clone)]
struct Split<E, R> {
    endpoint: E,
    routes: R,
}

impl<E, R> tower::Service<Request> for Split<E, R>
where
    E: tower::Service<Request, Response = Response, Error = Infallible>,
    R: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<E::Future, R::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::ready!(self.endpoint.poll_ready(cx))?;
        self.routes.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        match crate::extract::EndpointPath::parse(req.uri().path()) {
            Some(path) => {
                tracing::Span::current().record("http.route", path.route());
                req.extensions_mut().insert(path);
                Either::Left(self.endpoint.call(req))
            }
            None => Either::Right(self.routes.call(req)),
        }
    }
}

/// Records the matched route's template in the request span (made before routing, so
/// without it).
fn record_route<B>(req: Request<B>) -> Request<B> {
    if let Some(route) = req.extensions().get::<MatchedPath>() {
        tracing::Span::current().record("http.route", route.as_str());
    }
    req
}

/// The innermost middleware: [`crate::extract::nul_refusal`], then the idempotency key
/// ([`crate::idempotency::key_of`]).
///
/// A plain service rather than `middleware::from_fn`, which costs every request a clone of
/// the routes below it, boxed, and two boxed futures: here a request without a key goes
/// straight to the route, and only a keyed one is boxed.
#[derive(Clone)]
struct Innermost<S> {
    db: std::sync::Arc<crate::db::Db>,
    inner: S,
}

type Answer = std::future::Ready<Result<Response, Infallible>>;
type KeyedFuture = futures::future::BoxFuture<'static, Result<Response, Infallible>>;

impl<S> tower::Service<Request> for Innermost<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Answer, Either<S::Future, KeyedFuture>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if let Some(refusal) = crate::extract::nul_refusal(req.uri()) {
            return Either::Left(std::future::ready(Ok(refusal)));
        }
        match crate::idempotency::key_of(&req) {
            crate::idempotency::Keyed::Pass => Either::Right(Either::Left(self.inner.call(req))),
            crate::idempotency::Keyed::Refused(refusal) => Either::Left(std::future::ready(Ok(refusal))),
            crate::idempotency::Keyed::Key(key) => {
                // The ready service goes with the request; this one keeps a fresh clone.
                let fresh = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, fresh);
                let db = self.db.clone();
                Either::Right(Either::Right(Box::pin(async move { Ok(crate::idempotency::keyed(db, key, req, ready).await) })))
            }
        }
    }
}

fn request_span<B>(req: &Request<B>) -> tracing::Span {
    let request_id = req.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("");
    tracing::info_span!(
        "request",
        http.route = "",
        http.method = %req.method(),
        request_id = request_id,
        tenant_id = tracing::field::Empty,
    )
}

/// The access log's line for each response: status, latency and, for a problem, its `code`.
#[derive(Clone, Copy)]
struct LogResponse;

impl<B> OnResponse<B> for LogResponse {
    fn on_response(self, response: &axum::http::Response<B>, latency: Duration, _: &tracing::Span) {
        let code = response.extensions().get::<ProblemCode>().map(|c| &*c.0);
        tracing::info!(
            status = response.status().as_u16(),
            latency_us = latency.as_micros() as u64,
            code,
            "finished processing request"
        );
    }
}

/// Errors produced by the framework's layers become problem documents
/// ([`problem_for_bare_errors`]), or SCIM errors under /scim/.
///
/// A plain service rather than `middleware::from_fn`: the answer is mapped as it comes back,
/// with no clone of the services below and no boxed future.
#[derive(Clone)]
struct BareErrors<S>(S);

/// How [`BareErrors`] maps an answer: one of two functions, chosen by the request's path.
type MapAnswer<B, E> = fn(Result<axum::http::Response<B>, E>) -> Result<Response, E>;

impl<S, B> tower::Service<Request> for BareErrors<S>
where
    S: tower::Service<Request, Response = axum::http::Response<B>>,
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = futures::future::Map<S::Future, MapAnswer<B, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let scim = req.uri().path().starts_with(crate::scim::http::PREFIX);
        let answer: MapAnswer<B, S::Error> = if scim {
            |r| r.map(|response| crate::scim::http::scim_for_bare_errors(response.map(Body::new)))
        } else {
            |r| r.map(problem_for_bare_errors)
        };
        self.0.call(req).map(answer)
    }
}

fn problem_for_bare_errors<B>(response: axum::http::Response<B>) -> Response
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let status = response.status();
    // Only bodies the framework made up (none, or plain text) are replaced; our own problem
    // documents and HTML pages pass through.
    let made_up = response.headers().get(header::CONTENT_TYPE).is_none_or(|v| v.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !made_up {
        return response.map(axum::body::Body::new);
    }
    let code = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_request",
        s if s.is_server_error() => "internal",
        _ => "error",
    };
    let detail = status.canonical_reason().unwrap_or("error").to_lowercase();
    let mut replaced = problem(status, code, &detail, None);
    for name in [header::ALLOW, header::RETRY_AFTER, header::WWW_AUTHENTICATE] {
        if let Some(v) = response.headers().get(&name) {
            replaced.headers_mut().insert(name, v.clone());
        }
    }
    replaced
}

async fn not_found() -> Error {
    Error::NotFound { what: "route" }
}

async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// Ready when the database answers as the application role and every migration this
/// binary knows is applied.
///
/// A probe that meets a dead connection (the database restarted or failed over while this
/// replica was idle) condemns the pool's older connections and asks once more on a fresh one,
/// so readiness follows the database as soon as it is back. Each ask is one attempt bounded
/// in time ([`crate::db::Db::probe`]): while the database is gone the answer is a prompt 503.
async fn readyz(State(state): State<AppState>) -> Response {
    let mut current = migrate::is_current(&state.db).await;
    if let Err(e) = &current
        && e.is_connection_loss()
    {
        state.db.saw(e);
        current = migrate::is_current(&state.db).await;
    }
    match current {
        Ok(true) => Json(json!({ "status": "ready" })).into_response(),
        Ok(false) => problem(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "migrations pending", None),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            problem(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "database unreachable", None)
        }
    }
}
