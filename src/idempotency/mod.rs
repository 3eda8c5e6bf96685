//! `Idempotency-Key` on mutating API calls (issue 21 §2). A client that may retry a
//! `POST`/`PUT`/`PATCH`/`DELETE` under `/api/v1/tenants/{t}/` sends a key of its choosing; the
//! first request with the key is carried out and its answer stored for 24 hours, per tenant
//! and key; a retry with the same request answers that stored answer (marked
//! `Idempotent-Replayed: true`) without running anything; the same key with another request
//! is refused with 422 `idempotency_key_reused`. The key's row is written by the mutation's own
//! transaction (see [`crate::db::idempotency`]), so of concurrent duplicates exactly one runs.

mod store;

use std::{
    convert::Infallible,
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderName, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::Digest;
use tower::{Service, ServiceExt};

use crate::{
    db::{
        Db,
        idempotency::{self as hook, Pending, Phase},
    },
    error::{Error, Result},
    ids::TenantId,
};

/// The request header.
pub const HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// Set on an answer that was stored by an earlier request with the same key.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// How long a duplicate waits for the first request's answer to be stored.
const WAIT: Duration = Duration::from_secs(10);
/// The largest answer stored (API answers are small JSON documents).
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// What the middleware (`crate::http`'s innermost service) does with a request.
pub enum Keyed {
    /// Not a mutating tenant API request with the header: it goes through untouched.
    Pass,
    /// A well-formed key: [`keyed`] carries the request out.
    Key(String),
    /// A malformed key, refused before anything runs.
    Refused(Response),
}

/// Reads the request's key, if it is a mutating tenant API request that carries one.
pub fn key_of(req: &Request) -> Keyed {
    let mutating = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    let raw = match req.headers().get(HEADER) {
        Some(raw) if mutating && req.uri().path().starts_with("/api/v1/tenants/") => raw,
        _ => return Keyed::Pass,
    };
    match raw.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()) => Keyed::Key(k.to_owned()),
        _ => Keyed::Refused(
            Error::invalid("invalid_idempotency_key", None, "Idempotency-Key must be 1 to 255 visible ASCII characters")
                .into_response(),
        ),
    }
}

/// A keyed request: reads the body, runs the request through `inner` (the services below the
/// middleware) with the key in scope, then stores the answer (first request), or replays the
/// stored one (duplicates).
pub async fn keyed<S>(db: std::sync::Arc<Db>, key: String, req: Request, inner: S) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let (parts, body) = req.into_parts();
    // The body limit layer above bounds this.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else { return Error::PayloadTooLarge.into_response() };
    let mut h = sha2::Sha256::new();
    h.update(parts.method.as_str().as_bytes());
    h.update([0]);
    h.update(parts.uri.path_and_query().map_or("", |p| p.as_str()).as_bytes());
    h.update([0]);
    h.update(&bytes);
    let pending = Pending::new(key, h.finalize().to_vec());
    let run = inner.oneshot(Request::from_parts(parts, Body::from(bytes)));
    let response = hook::scope(pending.clone(), run).await.unwrap_or_else(|never| match never {});
    match pending.phase() {
        // Not a tenant request, refused before the key was checked, or the COMMIT carrying
        // the key got no answer (a retry with the key finds out what happened).
        Phase::Unchecked | Phase::Unknown(_) | Phase::Committing(_) => response,
        // Nothing written (or every write rolled back), and nothing stored.
        Phase::Armed(_) if response.status().is_success() => response,
        // Refused without claiming: a concurrent duplicate that committed first may be why
        // (its change made this one's compare-and-set fail): then its answer is this one's.
        Phase::Armed(tenant) => match store::find(&db, tenant, &pending.key).await {
            Ok(Some(found)) if found.digest == pending.digest() => replay(&db, tenant, &pending).await,
            _ => response,
        },
        Phase::Replay(tenant) | Phase::Lost(tenant) => replay(&db, tenant, &pending).await,
        Phase::Claimed(tenant) => record(&db, tenant, &pending, response).await,
    }
}

/// Checks the current request's key, if it carries one, for `tenant` and `actor` (called by
/// the tenant extractor once it has authenticated the caller). Nothing stored: the request
/// goes ahead, armed to claim the key. Stored for another request: 422. Stored for this one:
/// an error the middleware replaces with the stored answer.
pub async fn admit(db: &Db, tenant: TenantId, actor: &str) -> Result<()> {
    let Some(pending) = hook::unchecked() else { return Ok(()) };
    let digest = pending.bind(actor);
    // Boxed: most requests carry no key, and their futures should not carry this lookup.
    match Box::pin(store::find(db, tenant, &pending.key)).await? {
        None => {
            hook::arm(tenant);
            Ok(())
        }
        Some(found) if found.digest != digest => Err(reused()),
        Some(_) => {
            hook::replay(tenant);
            Err(Error::Conflict { code: "idempotency_key_replayed", message: "answered by an earlier request".into() })
        }
    }
}

fn reused() -> Error {
    Error::invalid(
        "idempotency_key_reused",
        None,
        "this Idempotency-Key was used for a different request (or by another caller) in the last 24 hours",
    )
}

/// What a retry gets when the first request's change committed but its answer was never
/// stored (see [`store::Found::orphaned`]): a definite outcome, never "retry shortly" forever.
fn lost_answer() -> Response {
    Error::Conflict {
        code: "idempotency_answer_lost",
        message: "the request with this Idempotency-Key was carried out (its change was saved), but its answer was lost \
                  in a database failure; read the resource to see the outcome"
            .into(),
    }
    .into_response()
}

/// What a retry gets when the first answer handed out a secret (see [`record`]).
fn withheld_answer() -> Response {
    Error::Conflict {
        code: "idempotency_answer_withheld",
        message: "the request with this Idempotency-Key was carried out; its answer held a secret, which Gatehouse \
                  shows only once, so it is not replayed (list the resource to find what it created)"
            .into(),
    }
    .into_response()
}

/// Answers what the first request with the key stored, waiting for it while that request is
/// still running (or storing its answer).
async fn replay(db: &Db, tenant: TenantId, pending: &Pending) -> Response {
    let deadline = Instant::now() + WAIT;
    let mut pause = Duration::from_millis(10);
    loop {
        match store::find(db, tenant, &pending.key).await {
            Ok(Some(found)) if found.digest != pending.digest() => return reused().into_response(),
            Ok(Some(store::Found { answer: None, orphaned: true, .. })) => return lost_answer(),
            Ok(Some(store::Found { answer: Some(answer), .. })) => {
                let mut r = (StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK), answer.body).into_response();
                if let Some(ct) = answer.content_type.and_then(|ct| HeaderValue::from_str(&ct).ok()) {
                    r.headers_mut().insert(header::CONTENT_TYPE, ct);
                }
                r.headers_mut().insert(REPLAYED, HeaderValue::from_static("true"));
                return r;
            }
            Ok(_) | Err(_) if Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Ok(_) => {
                return Error::Conflict {
                    code: "idempotency_key_in_progress",
                    message:
                        "a request with this Idempotency-Key was carried out, and its answer is not stored yet; retry shortly"
                            .into(),
                }
                .into_response();
            }
            Err(e) => return e.into_response(),
        }
    }
}

/// Stores the answer of the request that claimed the key, then answers it.
async fn record(db: &Db, tenant: TenantId, pending: &Pending, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_ANSWER_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "an answer under an Idempotency-Key could not be read");
            return Error::Internal(anyhow::anyhow!("unreadable answer")).into_response();
        }
    };
    // An answer that must not be stored (`Cache-Control: no-store`: it hands out a secret, such
    // as a new token's) is kept as a refusal that says so: a retry neither runs the request
    // again nor gets the secret a second time, and no secret is at rest in the key's row.
    let withheld = parts.headers.get(header::CACHE_CONTROL).is_some_and(|v| v.as_bytes().starts_with(b"no-store"));
    let answer = if withheld {
        let (refusal, body) = withheld_answer().into_parts();
        store::Answer {
            status: refusal.status.as_u16(),
            content_type: refusal.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
            body: axum::body::to_bytes(body, MAX_ANSWER_BYTES).await.map(|b| b.to_vec()).unwrap_or_default(),
        }
    } else {
        store::Answer {
            status: parts.status.as_u16(),
            content_type: parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
            body: bytes.to_vec(),
        }
    };
    // The mutation committed: storing its answer is worth a few tries (the database may be
    // failing over); should all fail, retries answer `idempotency_key_in_progress`.
    let mut pause = Duration::from_millis(50);
    for attempt in 1..=4 {
        match store::answer(db, tenant, &pending.key, &answer).await {
            Ok(()) => break,
            Err(e) if attempt < 4 => {
                tracing::debug!(error = %e, attempt, "storing an idempotent answer failed; retrying");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => tracing::warn!(error = %e, "the answer under an Idempotency-Key could not be stored"),
        }
    }
    axum::http::Response::from_parts(parts, Body::from(bytes))
}

/// Deletes keys older than 24 hours, every ten minutes, on every replica (a delete of what
/// another replica deleted first finds nothing).
pub async fn run(db: Db) {
    loop {
        match store::sweep(&db).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(expired = n, "idempotency keys expired"),
            Err(e) => tracing::warn!(error = %e, "sweeping idempotency keys failed"),
        }
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
}
