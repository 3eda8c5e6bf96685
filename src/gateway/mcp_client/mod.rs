//! A lean MCP client over streamable HTTP, for the gateway's hot path: one POST per request
//! on the shared downstream client ([`super::outbound`]), the answer read straight from the response (JSON, or an event
//! stream up to the response with the request's id), no worker task or channel in between.
//! It speaks what a gateway needs from a downstream: `initialize`, `tools/list`, `tools/call`,
//! and the other requests a native pool relays as they are. A call's progress token goes down
//! with it, and the progress and log notifications on its response stream go to the agent's
//! ([`super::upstream`]). A server's own requests on a call's stream (sampling, elicitation,
//! roots: the gateway declares them all) go to the agent and its answer is POSTed back
//! ([`super::asks`]); on any other stream they are refused at once. On 2026-07-28 ([`stateless`]) a server asks for input with an `InputRequiredResult`
//! instead (see `gateway::input`).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

mod asked;
mod stateless;

pub use stateless::{listen, stateless};

use super::{
    downstream::Failure,
    outbound::{self, Outbound, Response, Target},
    sse::EventParser,
    upstream::Upstream,
};
use crate::oauth::dpop::Binding;

/// The revision this client asks for; a server may answer an older one, which is then used.
pub const PROTOCOL: &str = "2025-11-25";
/// A response (JSON body, or one event) larger than this is refused.
const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// `tools/list` pages followed before the catalog is refused as unbounded.
const MAX_PAGES: usize = 64;
/// The most tools one connector may list: a longer catalog is refused, not truncated.
pub const MAX_TOOLS: usize = 10_000;

/// How many times one response stream is resumed (a GET with `Last-Event-ID`).
const MAX_RESUMES: u32 = 3;
/// The wait before resuming a stream whose server named no `retry` time.
const DEFAULT_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// How long the DELETE that ends a session may take.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// An initialized session with one downstream server.
#[derive(Debug)]
pub struct HttpSession {
    http: Outbound,
    target: Arc<Target>,
    /// The connector's static headers, the session id and the negotiated revision.
    headers: HeaderMap,
    next_id: AtomicU64,
    /// The server's `initialize` result (its capabilities and instructions), for a native
    /// pool to declare and relay.
    server: Value,
    /// Who answers the server's requests on the session's GET stream ([`asked`]).
    asked: asked::Asked,
    /// The credential's DPoP binding: a fresh proof on every request ([`send`]).
    dpop: Option<Arc<Binding>>,
}

/// One request to a downstream, with a fresh DPoP proof where the credential is bound, and
/// once more with the server's nonce when it answers `use_dpop_nonce` (RFC 9449 §9).
pub(crate) async fn send(
    http: &Outbound,
    method: Method,
    target: &Arc<Target>,
    mut headers: HeaderMap,
    body: Option<bytes::Bytes>,
    dpop: Option<&Binding>,
) -> Result<Response, outbound::Error> {
    let Some(dpop) = dpop else { return http.send(method, target, headers, body).await };
    let mut asked_again = false;
    loop {
        dpop.stamp(&mut headers, method.as_str(), &target.url);
        let r = http.send(method.clone(), target, headers.clone(), body.clone()).await?;
        if !asked_again && dpop.learn(r.status().as_u16(), r.headers()) {
            asked_again = true;
            continue;
        }
        return Ok(r);
    }
}

/// Why a request failed, before it becomes a [`Failure`].
enum Trouble {
    /// The server no longer knows the session (404, or 400, to a request that carried its id):
    /// the request was not processed, so a new session may safely send it again.
    SessionGone,
    Failed(Failure),
}

impl From<Failure> for Trouble {
    fn from(f: Failure) -> Self {
        Trouble::Failed(f)
    }
}

fn not_a_url() -> Failure {
    Failure::Unavailable("the connector's URL is not a URL".into())
}

fn cap(text: &str) -> String {
    text.chars().take(512).collect()
}

fn unavailable(e: outbound::Error) -> Failure {
    Failure::Unavailable(cap(&e.to_string()))
}

impl HttpSession {
    /// Runs the handshake: `initialize`, then `notifications/initialized`.
    pub async fn connect(
        http: Outbound,
        url: &str,
        custom: HeaderMap,
        dpop: Option<Arc<Binding>>,
    ) -> Result<HttpSession, Failure> {
        let target = http.target(url).ok_or_else(not_a_url)?;
        let mut headers = custom;
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let mut session = HttpSession {
            http,
            target,
            headers,
            next_id: AtomicU64::new(1),
            server: Value::Null,
            asked: Default::default(),
            dpop,
        };
        // Declared for every agent: whether this one can answer is judged per request, and a
        // request it cannot answer is refused to the server as the agent would refuse it.
        let params = json!({
            "protocolVersion": PROTOCOL,
            "capabilities": { "sampling": {}, "elicitation": { "form": {}, "url": {} }, "roots": {} },
            "clientInfo": { "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") },
        });
        let (result, session_id): (Value, _) = match session.exchange("initialize", params, "initialize result", None).await {
            Ok(answer) => answer,
            Err(Trouble::Failed(f)) => return Err(f),
            Err(Trouble::SessionGone) => return Err(Failure::Unavailable("HTTP 404 to initialize".into())),
        };
        if let Some(id) = session_id {
            session.headers.insert(SESSION_ID, id);
        }
        let revision = result.get("protocolVersion").and_then(Value::as_str).unwrap_or(PROTOCOL);
        let revision =
            HeaderValue::from_str(revision).map_err(|_| Failure::Unavailable("a malformed protocol version".into()))?;
        session.headers.insert(PROTOCOL_VERSION, revision);
        session.server = result;
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let r = session.post(&note, Some("notifications/initialized")).await?;
        if let Some(refused) = Failure::refused(r.status().as_u16(), r.headers()) {
            return Err(refused);
        }
        if !r.status().is_success() {
            return Err(Failure::Unavailable(format!("HTTP {} to notifications/initialized", r.status().as_u16())));
        }
        Ok(session)
    }

    /// One POST of the session; `method`: the request's or notification's, sent as the
    /// `Mcp-Method` header too (SEP-2243 asks it of every POST; servers of earlier revisions
    /// ignore it), none for a response.
    async fn post(&self, body: &impl Serialize, method: Option<&str>) -> Result<Response, Failure> {
        let body = serde_json::to_vec(body).map_err(|e| Failure::Unavailable(e.to_string()))?;
        let mut headers = self.headers.clone();
        if let Some(method) = method.and_then(|m| HeaderValue::from_str(m).ok()) {
            headers.insert(HeaderName::from_static("mcp-method"), method);
        }
        send(&self.http, Method::POST, &self.target, headers, Some(body.into()), self.dpop.as_deref()).await.map_err(unavailable)
    }

    /// One request and its response's `result` (as `R`; `what` names it in the error when it
    /// does not parse as one), plus the session id the server assigned.
    async fn exchange<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        what: &str,
        upstream: Option<&Upstream>,
    ) -> Result<(R, Option<HeaderValue>), Trouble> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // While this request runs, the agent answers what the server asks on the GET stream.
        let _hold = match upstream.filter(|u| u.can_ask() && self.has_session_id()) {
            Some(upstream) => Some(self.asked.hold(upstream).await),
            None => None,
        };
        let r = self.post(&Outgoing { jsonrpc: "2.0", id, method, params }, Some(method)).await?;
        let status = r.status();
        // The specification says 404; some servers (the TypeScript SDK's among them) answer 400
        // to a session id they do not know. Either way the request was refused, not processed,
        // so the caller may open a new session and send it once more.
        if matches!(status.as_u16(), 400 | 404) && self.headers.contains_key(SESSION_ID) {
            return Err(Trouble::SessionGone);
        }
        if let Some(refused) = Failure::refused(status.as_u16(), r.headers()) {
            return Err(refused.into());
        }
        if !status.is_success() {
            return Err(Failure::Unavailable(format!("HTTP {}", status.as_u16())).into());
        }
        let session_id = r.headers().get(SESSION_ID).cloned();
        let streamed = r
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let malformed = |e: serde_json::Error| Failure::Unavailable(cap(&format!("a malformed {what}: {e}")));
        if streamed {
            // Boxed: the stream reader's state is kilobytes, which a JSON answer (the usual
            // case) should not carry in every call's future.
            let message = Box::pin(Self::from_stream(r, id, upstream, Some(self))).await?;
            return Ok((serde_json::from_value(Self::result(message, id)?).map_err(malformed)?, session_id));
        }
        let body = Self::from_body(r).await?;
        // The usual answer, parsed straight into `R`; anything else (an error, another id, a
        // result that is no `R`) is judged on the generic JSON value below, as before.
        if let Ok(Incoming { id: Some(got), result: Some(result), error: None }) = serde_json::from_slice::<Incoming<R>>(&body)
            && got.as_u64() == Some(id)
        {
            return Ok((result, session_id));
        }
        let message: Value = serde_json::from_slice(&body)
            .map_err(|e| Failure::Unavailable(cap(&format!("the server's answer is not JSON: {e}"))))?;
        Ok((serde_json::from_value(Self::result(message, id)?).map_err(malformed)?, session_id))
    }

    async fn from_body(mut r: Response) -> Result<Vec<u8>, Failure> {
        let mut body = Vec::new();
        while let Some(chunk) = r.chunk().await.map_err(unavailable)? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(Failure::Rejected("the server's response is larger than 16 MiB".into()));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Reads events until the response to `id`; the call's notifications before it go to
    /// `upstream` (when there is one), and so do the server's requests, whose answers are
    /// POSTed back on `session`; anything else on the stream is skipped. A stream of a
    /// session that closes (or breaks) before the response after naming an event id is
    /// resumed: after the server's `retry` time, a GET with `Last-Event-ID`, at most
    /// [`MAX_RESUMES`] times (SEP-1699).
    async fn from_stream(
        mut r: Response,
        id: u64,
        upstream: Option<&Upstream>,
        session: Option<&HttpSession>,
    ) -> Result<Value, Failure> {
        let mut parser = EventParser::new(MAX_RESPONSE_BYTES);
        let mut events = std::collections::VecDeque::new();
        let mut resumes = 0;
        loop {
            let chunk = match r.chunk().await {
                Ok(Some(chunk)) => chunk,
                ended => {
                    let resumed = match (session, parser.last_event_id()) {
                        (Some(session), Some(last)) if resumes < MAX_RESUMES => {
                            resumes += 1;
                            tokio::time::sleep(parser.retry().unwrap_or(DEFAULT_RETRY)).await;
                            session.open_stream_after(Some(last)).await?
                        }
                        _ => None,
                    };
                    match (resumed, ended) {
                        (Some(stream), _) => {
                            r = stream;
                            // A new stream: its events start afresh; the last id carries on.
                            parser = parser.resumed();
                            continue;
                        }
                        (None, Err(e)) => return Err(unavailable(e)),
                        (None, _) => return Err(Failure::Unavailable("the response stream ended before the response".into())),
                    }
                }
            };
            parser.feed(&chunk, &mut events).map_err(|e| Failure::Rejected(cap(&e.to_string())))?;
            while let Some(event) = events.pop_front() {
                if event.kind != "message" {
                    continue;
                }
                let Ok(message) = serde_json::from_str::<Value>(&event.data) else { continue };
                if message.get("id").and_then(Value::as_u64) == Some(id)
                    && (message.get("result").is_some() || message.get("error").is_some())
                {
                    return Ok(message);
                }
                if message.get("method").is_some()
                    && let Some(asked) = message.get("id").cloned()
                {
                    let Some(session) = session else { continue };
                    let answer = match upstream {
                        Some(upstream) => upstream.downstream_request(message).await,
                        None => super::asks::refusal(&asked, -32601, "Method not found: no agent is waiting on this request"),
                    };
                    session.send_answer(&answer).await;
                    continue;
                }
                if let Some(upstream) = upstream
                    && message.get("id").is_none()
                {
                    upstream.downstream_message(message).await;
                }
            }
        }
    }

    fn result(mut message: Value, id: u64) -> Result<Value, Failure> {
        if message.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(Failure::Unavailable("the server answered another request".into()));
        }
        if let Some(error) = message.get("error") {
            let text = error.get("message").and_then(Value::as_str).unwrap_or("the server refused the request");
            return Err(match error.get("code").and_then(Value::as_i64).and_then(|c| i32::try_from(c).ok()) {
                Some(code) => Failure::json_rpc(code, text, error.get("data").cloned()),
                None => Failure::Rejected(cap(text)),
            });
        }
        message.get_mut("result").map(Value::take).ok_or_else(|| Failure::Unavailable("a response without a result".into()))
    }

    /// One request on this session. `Err(None)` means the session is gone and the request
    /// was not processed.
    async fn request<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        what: &str,
        upstream: Option<&Upstream>,
    ) -> Result<R, Option<Failure>> {
        match self.exchange(method, params, what, upstream).await {
            Ok((result, _)) => Ok(result),
            Err(Trouble::SessionGone) => Err(None),
            Err(Trouble::Failed(f)) => Err(Some(f)),
        }
    }

    /// Every tool, following `nextCursor`.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, Option<Failure>> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page: ToolsPage = self.request("tools/list", params, "tool list", None).await?;
            if tools.len() + page.tools.listed > MAX_TOOLS {
                let listed = tools.len() + page.tools.listed;
                return Err(Some(Failure::Rejected(format!("the tool list has {listed} tools, more than {MAX_TOOLS}"))));
            }
            tools.extend(page.tools.kept);
            match page.next_cursor.as_ref().and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(tools),
            }
        }
        Err(Some(Failure::Rejected(format!("the tool list has more than {MAX_PAGES} pages"))))
    }

    /// Ends the session at the server in the background: an HTTP DELETE with its
    /// `Mcp-Session-Id`, as the specification allows a client. Nothing is sent for a server
    /// that assigned no session, or outside a runtime (at exit); its answer is not awaited.
    pub fn close(&self) {
        self.asked.stop();
        if !self.headers.contains_key(SESSION_ID) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let mut headers = self.headers.clone();
        if let Some(dpop) = &self.dpop {
            dpop.stamp(&mut headers, "DELETE", &self.target.url);
        }
        let (http, target) = (self.http.clone(), self.target.clone());
        runtime.spawn(async move {
            match tokio::time::timeout(CLOSE_TIMEOUT, http.send(Method::DELETE, &target, headers, None)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "could not delete a downstream session"),
                Err(_) => tracing::debug!("the downstream did not answer the session's DELETE in time"),
            }
        });
    }

    /// Opens the session's GET stream, where the server says what belongs to no request
    /// (list changes, resource updates). `Ok(None)`: the server offers no such stream (it
    /// answered 405, as the specification lets it).
    pub async fn open_stream(&self) -> Result<Option<Response>, Failure> {
        self.open_stream_after(None).await
    }

    /// [`HttpSession::open_stream`], resuming after the event `last` (`Last-Event-ID`): the
    /// server replays what followed it, on this stream.
    async fn open_stream_after(&self, last: Option<&str>) -> Result<Option<Response>, Failure> {
        let mut headers = self.headers.clone();
        if let Some(last) = last.and_then(|l| HeaderValue::from_str(l).ok()) {
            headers.insert(HeaderName::from_static("last-event-id"), last);
        }
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.remove(header::CONTENT_TYPE);
        let r = send(&self.http, Method::GET, &self.target, headers, None, self.dpop.as_deref()).await.map_err(unavailable)?;
        opened(r)
    }

    /// Answers a request the server sent where no agent waits (its GET stream): a `ping` is
    /// answered, anything else is refused as an agent without that capability would.
    pub async fn answer_unattended(&self, request: &Value) {
        let id = &request["id"];
        let answer = match request["method"].as_str() {
            Some("ping") => json!({ "jsonrpc": "2.0", "id": id, "result": {} }),
            _ => super::asks::refusal(id, -32601, "Method not found: no agent is waiting on this stream"),
        };
        if let Err(f) = self.post(&answer, None).await {
            tracing::debug!(failure = ?f, "could not answer a downstream's request on its GET stream");
        }
    }

    /// Whether the server gave the session an id (a stateful session).
    fn has_session_id(&self) -> bool {
        self.headers.contains_key(SESSION_ID)
    }

    /// POSTs the agent's answer to one of the server's requests.
    async fn send_answer(&self, answer: &Value) {
        match self.post(answer, None).await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => tracing::info!(status = r.status().as_u16(), "the downstream refused the agent's answer"),
            Err(f) => tracing::info!(failure = ?f, "the agent's answer could not be sent to the downstream"),
        }
    }

    /// What the server said of itself in its `initialize` result.
    pub fn server(&self) -> &Value {
        &self.server
    }

    /// Any other request a native pool relays (prompts, resources, completion, logging), its
    /// result as the server sent it; with `upstream`, what the server sends on the request's
    /// stream (notifications, requests to the agent) goes to the agent as during a call.
    pub async fn relay(&self, method: &str, params: &Value, upstream: Option<&Upstream>) -> Result<Value, Option<Failure>> {
        self.request(method, params, "result", upstream).await
    }

    /// `tools/call`; with `upstream`, the agent's progress token goes down and the call's
    /// notifications come back to the agent.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: &JsonObject,
        upstream: Option<&Upstream>,
    ) -> Result<CallToolResult, Option<Failure>> {
        let meta = upstream.and_then(Upstream::progress_token).map(|token| CallMeta { progress_token: token });
        self.request("tools/call", CallParams { name, arguments, meta }, "tool result", upstream).await
    }
}

/// A request as sent.
#[derive(Serialize)]
struct Outgoing<'a, P> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: P,
}

#[derive(Serialize)]
struct CallParams<'a> {
    name: &'a str,
    arguments: &'a JsonObject,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<CallMeta<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallMeta<'a> {
    progress_token: &'a rmcp::model::ProgressToken,
}

/// One page of `tools/list`.
#[derive(Deserialize)]
struct ToolsPage {
    #[serde(default)]
    tools: CappedTools,
    #[serde(rename = "nextCursor")]
    next_cursor: Option<Value>,
}

/// A page's tools, parsed one by one and kept up to [`MAX_TOOLS`]; the rest are only counted,
/// so a hostile catalog costs its bytes (capped per response), never a value per tool.
#[derive(Default)]
struct CappedTools {
    kept: Vec<Tool>,
    listed: usize,
}

impl<'de> Deserialize<'de> for CappedTools {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Tools;
        impl<'de> serde::de::Visitor<'de> for Tools {
            type Value = CappedTools;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of tools")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<CappedTools, A::Error> {
                let mut capped = CappedTools::default();
                while capped.listed < MAX_TOOLS {
                    let Some(tool) = seq.next_element::<Tool>()? else { return Ok(capped) };
                    capped.kept.push(tool);
                    capped.listed += 1;
                }
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    capped.listed += 1;
                }
                Ok(capped)
            }
        }
        deserializer.deserialize_seq(Tools)
    }
}

/// The parts of a response the usual answer needs.
#[derive(Deserialize)]
struct Incoming<R> {
    id: Option<Value>,
    result: Option<R>,
    error: Option<Value>,
}

/// A stream's opening answer: the stream, none (405), or why not.
fn opened(r: Response) -> Result<Option<Response>, Failure> {
    if r.status() == StatusCode::METHOD_NOT_ALLOWED {
        return Ok(None);
    }
    if let Some(refused) = Failure::refused(r.status().as_u16(), r.headers()) {
        return Err(refused);
    }
    if !r.status().is_success() {
        return Err(Failure::Unavailable(format!("HTTP {} to the GET stream", r.status().as_u16())));
    }
    Ok(Some(r))
}
