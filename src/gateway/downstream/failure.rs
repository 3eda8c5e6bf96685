//! Why a downstream request did not produce a result, and how that is told.

/// The largest `data` of a downstream's JSON-RPC error relayed, serialized.
pub const ERROR_DATA_CAP: usize = 4096;

/// A downstream's text as far as it is kept (messages, parse errors).
pub(super) fn cap(text: &str) -> String {
    text.chars().take(512).collect()
}

/// Why a downstream call did not produce a result.
#[derive(Debug)]
pub enum Failure {
    /// Unreachable, refused, or the session broke: retryable.
    Unavailable(String),
    /// No answer within the connector's deadline: retryable.
    Timeout(u64),
    /// The downstream answered with a JSON-RPC error (its own message, capped).
    Rejected(String),
    /// The downstream answered with a JSON-RPC error carrying its code (message capped, data
    /// kept when small): a native pool answers it as that error ([`Failure::json_rpc`]);
    /// elsewhere it is a `downstream_error` like [`Failure::Rejected`].
    JsonRpc(rmcp::ErrorData),
    /// The tenant already has its share of downstream calls in flight on this replica.
    RateLimited,
    /// The connector's credential slot cannot be used (missing, unreadable, vault off).
    Auth(crate::gateway::credentials::Problem),
    /// The downstream refused the request's credential (HTTP 401 or 403) after connecting:
    /// `challenge` is its `WWW-Authenticate`, if any. The gateway turns it into `auth_required`
    /// (marking an OAuth grant as needing repair), never `unavailable`.
    Refused { status: u16, challenge: Option<String> },
    /// The arguments cannot be turned into a request (they passed the schema, but e.g. a path
    /// argument is `..`).
    BadArguments(String),
    /// A peer connector has no target to call (`not_installed`, `ambiguous`,
    /// `bound_unavailable`, `peer_cycle`, `peer_depth_exceeded`, `workspace_suspended`).
    Peer { code: &'static str, message: String },
}

impl Failure {
    /// The failure of an answer with this HTTP status, if it is a refusal of the credential
    /// (401, or 403): `challenge` from the response's `WWW-Authenticate` values.
    pub fn refused(status: u16, headers: &axum::http::HeaderMap) -> Option<Failure> {
        matches!(status, 401 | 403).then(|| {
            let values: Vec<&str> =
                headers.get_all(axum::http::header::WWW_AUTHENTICATE).iter().filter_map(|v| v.to_str().ok()).collect();
            let challenge = (!values.is_empty()).then(|| cap(&values.join(", ")));
            Failure::Refused { status, challenge }
        })
    }

    /// A downstream's JSON-RPC error, bounded: the message capped, `data` dropped when larger
    /// than [`ERROR_DATA_CAP`] serialized.
    pub fn json_rpc(code: i32, message: &str, data: Option<serde_json::Value>) -> Failure {
        let data = data.filter(|d| serde_json::to_vec(d).is_ok_and(|b| b.len() <= ERROR_DATA_CAP));
        Failure::JsonRpc(rmcp::ErrorData::new(rmcp::model::ErrorCode(code), cap(message), data))
    }

    /// The failure as an API error (all retryable but a rejection).
    pub fn into_error(self) -> crate::error::Error {
        let (code, message, retry_after_ms) = match self {
            Failure::Unavailable(_) => {
                ("unavailable", "the connector's server cannot be reached; retry shortly".to_owned(), None)
            }
            Failure::Timeout(ms) => ("timeout", format!("the connector's server did not answer within {ms} ms"), None),
            Failure::RateLimited => {
                ("rate_limited", "this tenant has too many calls in flight; retry shortly".to_owned(), Some(250))
            }
            Failure::Rejected(message) | Failure::BadArguments(message) => ("downstream_error", message, None),
            Failure::JsonRpc(error) => ("downstream_error", error.message.into_owned(), None),
            Failure::Auth(problem) => return problem.into_error(),
            Failure::Refused { status, .. } => {
                return crate::error::Error::Conflict {
                    code: "auth_required",
                    message: format!("the connector's server refused its credential (HTTP {status})"),
                };
            }
            Failure::Peer { code, message } => return crate::error::Error::Conflict { code, message },
        };
        crate::error::Error::Unavailable { code, message, retry_after_ms }
    }
}
