//! Request helpers every layer may use: the JSON extractor with problem+json rejections,
//! id parsing, the request id and `Cache-Control: no-store`. It sits at the bottom of the
//! layers (beside `error`), so nouns never import the root router.

use axum::{
    Json,
    extract::{FromRequest, Request, rejection::JsonRejection},
    http::{HeaderValue, StatusCode, header},
    response::Response,
};

use crate::error::Error;

/// The header that carries a request's id (set by the root router's middleware).
pub const REQUEST_ID: axum::http::HeaderName = axum::http::HeaderName::from_static("x-request-id");

/// The request id of a request, for admin-log rows.
pub fn request_id(headers: &axum::http::HeaderMap) -> Option<String> {
    headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// A JSON body whose rejections are problem+json with the stable code `invalid_json`.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => {
                Err(Error::invalid("unsupported_media_type", None, "send Content-Type: application/json"))
            }
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(Error::PayloadTooLarge),
            Err(e) => Err(Error::invalid("invalid_json", None, e.body_text())),
        }
    }
}

/// The refusal of a request whose path or query holds an encoded NUL (`%00`), 400 `bad_request`:
/// no identifier, slug or filter may hold one, and PostgreSQL refuses NUL in text, so letting
/// it through would turn a client's mistake into a 500 deep in a query.
pub fn nul_refusal(uri: &axum::http::Uri) -> Option<Response> {
    let has_nul = |s: &str| s.as_bytes().windows(3).any(|w| w[0] == b'%' && w[1] == b'0' && w[2] == b'0');
    (has_nul(uri.path()) || uri.query().is_some_and(has_nul))
        .then(|| crate::error::problem(StatusCode::BAD_REQUEST, "bad_request", "a path or query may not contain NUL (%00)", None))
}

/// Parses an id from a path; anything malformed is simply not found.
pub fn parse_id(raw: &str, what: &'static str) -> Result<uuid::Uuid, Error> {
    raw.parse().map_err(|_| Error::NotFound { what })
}

/// `Cache-Control: no-store`, for responses that carry something only this caller may see.
pub fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
