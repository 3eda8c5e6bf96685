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
pub const REQUEST_ID: &str = "x-request-id";

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

/// Parses an id from a path; anything malformed is simply not found.
pub fn parse_id(raw: &str, what: &'static str) -> Result<uuid::Uuid, Error> {
    raw.parse().map_err(|_| Error::NotFound { what })
}

/// `Cache-Control: no-store`, for responses that carry something only this caller may see.
pub fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
