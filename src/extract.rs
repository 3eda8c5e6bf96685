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

/// The MCP endpoint's path (`/t/{tenant}/w/{workspace}/mcp`, or `…/mcp/{pool}`), when a request
/// is sent to the endpoint without axum's router (`crate::http`): the router's matching, its
/// parameters and its boxed route cost the endpoint's every call a few thousand instructions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointPath {
    pub tenant: String,
    pub workspace: String,
    pub pool: Option<String>,
}

impl EndpointPath {
    /// The route templates, as the router would have matched them (for the request span).
    pub const ROUTE: &'static str = "/t/{tenant}/w/{workspace}/mcp";
    pub const POOL_ROUTE: &'static str = "/t/{tenant}/w/{workspace}/mcp/{pool}";

    /// `path` parsed, when it is exactly the endpoint's with non-empty segments. A path with a
    /// percent sign is left to the router, which decodes its parameters, as for every route.
    pub fn parse(path: &str) -> Option<EndpointPath> {
        let rest = path.strip_prefix("/t/")?;
        if rest.contains('%') {
            return None;
        }
        let mut segments = rest.split('/');
        let (tenant, w, workspace, mcp) = (segments.next()?, segments.next()?, segments.next()?, segments.next()?);
        let pool = segments.next();
        let fits = w == "w" && mcp == "mcp" && !tenant.is_empty() && !workspace.is_empty() && pool != Some("");
        (fits && segments.next().is_none()).then(|| EndpointPath {
            tenant: tenant.to_owned(),
            workspace: workspace.to_owned(),
            pool: pool.map(str::to_owned),
        })
    }

    /// The template of the route this path stands for.
    pub fn route(&self) -> &'static str {
        if self.pool.is_some() { Self::POOL_ROUTE } else { Self::ROUTE }
    }

    fn get(&self, name: &str) -> Option<String> {
        match name {
            "tenant" => Some(self.tenant.clone()),
            "workspace" => Some(self.workspace.clone()),
            "pool" => self.pool.clone(),
            _ => None,
        }
    }
}

/// The named path parameters of a request, each `None` where the route has no such
/// parameter: from its [`EndpointPath`] if it has one, else from the parameters axum's router
/// matched. `None` when those cannot be read (a segment that decodes to invalid UTF-8).
pub async fn path_params<const N: usize>(
    parts: &mut axum::http::request::Parts,
    names: [&str; N],
) -> Option<[Option<String>; N]> {
    if let Some(path) = parts.extensions.get::<EndpointPath>() {
        return Some(names.map(|name| path.get(name)));
    }
    let params =
        <axum::extract::RawPathParams as axum::extract::FromRequestParts<()>>::from_request_parts(parts, &()).await.ok()?;
    Some(names.map(|name| params.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_owned())))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::EndpointPath;

    /// A path segment as a client may send one: anything but a slash, a percent sign sometimes.
    fn segment() -> impl Strategy<Value = String> {
        "[^/]{0,12}"
    }

    proptest! {
        /// Exactly the endpoint's paths with non-empty, undecoded segments parse, to their
        /// segments; every other path is left to the router.
        #[test]
        fn only_the_endpoints_own_paths_parse(
            tenant in segment(), w in prop_oneof![Just("w".to_owned()), segment()],
            workspace in segment(), mcp in prop_oneof![Just("mcp".to_owned()), segment()],
            rest in prop::collection::vec(segment(), 0..3),
        ) {
            let mut path = format!("/t/{tenant}/{w}/{workspace}/{mcp}");
            for r in &rest {
                path.push('/');
                path.push_str(r);
            }
            let pool = rest.first().cloned();
            let fits = w == "w" && mcp == "mcp" && !tenant.is_empty() && !workspace.is_empty() && rest.len() <= 1
                && pool.as_deref() != Some("") && !path.contains('%');
            let expected = fits.then(|| EndpointPath { tenant: tenant.clone(), workspace: workspace.clone(), pool: pool.clone() });
            prop_assert_eq!(EndpointPath::parse(&path), expected);
        }

        /// Whatever else a path is, it never parses unless it has the endpoint's shape.
        #[test]
        fn arbitrary_paths_parse_only_to_their_own_segments(path in "\\PC{0,40}") {
            if let Some(p) = EndpointPath::parse(&path) {
                let rebuilt = match &p.pool {
                    Some(pool) => format!("/t/{}/w/{}/mcp/{pool}", p.tenant, p.workspace),
                    None => format!("/t/{}/w/{}/mcp", p.tenant, p.workspace),
                };
                prop_assert_eq!(rebuilt, path);
            }
        }
    }

    #[test]
    fn the_templates_routes_and_edges() {
        let p = EndpointPath::parse("/t/acme/w/main/mcp").unwrap();
        assert_eq!(
            (p.tenant.as_str(), p.workspace.as_str(), p.pool.as_deref(), p.route()),
            ("acme", "main", None, EndpointPath::ROUTE)
        );
        let p = EndpointPath::parse("/t/acme/w/main/mcp/reads").unwrap();
        assert_eq!((p.pool.as_deref(), p.route()), (Some("reads"), EndpointPath::POOL_ROUTE));
        for refused in [
            "/t/acme/w/main/mcp/",
            "/t/acme/w/main/mcp/a/b",
            "/t//w/main/mcp",
            "/t/acme/w/ma%69n/mcp",
            "/t/acme/x/main/mcp",
            "/t/acme/w/main",
        ] {
            assert_eq!(EndpointPath::parse(refused), None, "{refused}");
        }
    }
}
