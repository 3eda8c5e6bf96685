//! The gateway's HTTP client for downstream MCP servers.
//!
//! A plain-HTTP downstream that no proxy intercepts is spoken to over hyper's HTTP/1
//! connections, kept alive per downstream URL by [`Direct`]. A TLS downstream, or one a proxy
//! from the environment intercepts, goes through reqwest, with its TLS roots and its proxy
//! support. Both have the same connect timeout, `TCP_NODELAY`, TCP keepalive and idle timeout,
//! and neither follows redirects or bounds a whole request: a streamed answer may be long, and
//! each call has its own deadline.
//!
//! Why two: on the hot path reqwest parses the downstream's URL twice per request (its
//! redirect policy and its response each keep a `Url`) and runs its layers around hyper's
//! client. That was a tenth of the gateway's instructions per `tools/call` (docs/benchmarks.md,
//! "reqwest off the hot path").
//!
//! Why the direct connections have no task of their own (docs/decisions.md, "Downstream
//! connections driven by their caller"): the request that uses a connection drives it, from
//! sending the request to the last byte of the answer. A call then runs in one task from the
//! agent's request to its answer, where a pooled client's connection task would be woken, and
//! would wake the call, twice per call, often across worker threads.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, Weak},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::{Body as _, Incoming},
    client::conn::http1,
};
use hyper_util::{
    client::{legacy::connect::HttpConnector, proxy::matcher::Matcher},
    rt::TokioIo,
};
use tower::Service as _;

/// How long opening a connection to a downstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle pooled connection is kept (reqwest's default, for both pools).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// TCP keepalive: idle time before the first probe and between probes (reqwest's default).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How many downstream URLs' targets are kept parsed; past that the memo starts afresh.
const TARGETS_KEPT: usize = 1024;
/// Idle connections kept per downstream URL; one more is closed when its answer ends.
const IDLE_KEPT: usize = 128;
/// How often idle direct connections are looked at: a downstream may have closed them, or
/// they may have been idle for longer than [`IDLE_TIMEOUT`].
const SWEEP_EVERY: Duration = Duration::from_secs(15);

type Targets = Mutex<HashMap<Box<str>, Arc<Target>>>;

/// The downstream client: cheap to clone (both pools are shared).
#[derive(Clone, Debug)]
pub struct Outbound {
    general: reqwest::Client,
    connector: HttpConnector,
    proxies: Arc<Matcher>,
    /// Each URL's target as parsed the first time: a 2026-07-28 downstream has no session to
    /// keep it in, and would otherwise be parsed twice and matched against the proxies on
    /// every request. A direct target keeps its idle connections.
    targets: Arc<Targets>,
}

/// Where requests to one downstream go: its URL (which a DPoP proof names), and how requests
/// to it go through the direct connections.
#[derive(Debug)]
pub struct Target {
    pub url: reqwest::Url,
    direct: Option<Direct>,
}

/// A plain-HTTP downstream's request line target and `Host`, and its idle connections.
#[derive(Debug)]
struct Direct {
    /// The URL, for the connector.
    uri: Uri,
    /// The origin-form request target (`/mcp?x=1`).
    path: Uri,
    host: HeaderValue,
    idle: Mutex<Vec<Conn>>,
}

/// One kept-alive HTTP/1 connection: the sender of its requests and the connection itself,
/// which whoever uses it polls.
struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    conn: http1::Connection<TokioIo<tokio::net::TcpStream>, Full<Bytes>>,
    /// The connection has ended (its future is done and is not polled again).
    ended: bool,
    idle_since: Instant,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl Conn {
    /// Polls the connection (reads and writes what it can) unless it has ended.
    fn poll_conn(&mut self, cx: &mut Context<'_>) {
        if !self.ended && Pin::new(&mut self.conn).poll(cx).is_ready() {
            self.ended = true;
        }
    }

    /// `fut`'s output, with the connection driven while it waits: `fut` is polled first (so
    /// it registers what it waits for), then the connection, then `fut` again.
    async fn drive<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            self.poll_conn(cx);
            fut.as_mut().poll(cx)
        })
        .await
    }

    /// Whether the connection can take a request now: polled once, it has not ended (the
    /// downstream closed it) and has no answer left to read.
    fn open(&mut self, cx: &mut Context<'_>) -> bool {
        self.poll_conn(cx);
        !self.ended && matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(())))
    }

    /// Whether an idle connection can take a request now: it is [open](Self::open) and has
    /// not outlived [`IDLE_TIMEOUT`].
    fn usable(&mut self, cx: &mut Context<'_>) -> bool {
        self.idle_since.elapsed() < IDLE_TIMEOUT && self.open(cx)
    }
}

impl Direct {
    /// A usable idle connection, newest first; those found unusable are closed.
    async fn checkout(&self) -> Option<Conn> {
        loop {
            let mut conn = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop()?;
            if std::future::poll_fn(|cx| Poll::Ready(conn.usable(cx))).await {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for the next request, if it is still open and there is room.
    fn check_in(&self, mut conn: Conn) {
        if conn.ended || conn.sender.is_closed() {
            return;
        }
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_KEPT {
            idle.push(conn);
        }
    }
}

/// A downstream's response, from either pool.
#[derive(Debug)]
pub enum Response {
    Direct(Box<DirectResponse>),
    General(reqwest::Response),
}

/// A response on a direct connection, which reading the body drives. The connection goes
/// back to its target once the body has ended. A response dropped before that (a client that
/// has the message it waited for on an event stream stops reading) keeps its connection only
/// if the rest of the body has already arrived, as hyper's pooled client would.
#[derive(Debug)]
pub struct DirectResponse {
    head: axum::http::response::Parts,
    /// Taken when the response is dropped, so the connection can drain the rest.
    body: Option<Incoming>,
    conn: Option<Conn>,
    target: Arc<Target>,
}

impl Drop for DirectResponse {
    fn drop(&mut self) {
        let (Some(mut conn), Some(direct)) = (self.conn.take(), &self.target.direct) else { return };
        drop(self.body.take());
        // Polled without waiting: the connection reads what has already arrived of the
        // dropped body and discards it, or closes if more is due (hyper's own rule).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if conn.open(&mut cx) {
            direct.check_in(conn);
        }
    }
}

/// Why a request got no response, or its body broke off: the error and its causes, without
/// the URL (which may carry a credential in its query).
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Self {
        Error(e.without_url().to_string())
    }
}

/// `e` and its sources, joined by ": " (hyper's own text names only the outermost).
fn described(e: &(dyn std::error::Error + 'static)) -> Error {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    Error(text)
}

impl Outbound {
    /// Both pools, and the proxies the environment names (`HTTP_PROXY`, `NO_PROXY`, …), read
    /// once, as reqwest reads them. Inside a runtime, a task closes idle direct connections
    /// that have ended or outlived [`IDLE_TIMEOUT`] (it stops when the last clone is dropped).
    pub fn new() -> anyhow::Result<Outbound> {
        crate::install_crypto();
        let general = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .tcp_nodelay(true)
            .build()?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        // reqwest's defaults: a dead peer under a long GET stream is found within a minute or so.
        connector.set_keepalive(Some(KEEPALIVE));
        connector.set_keepalive_interval(Some(KEEPALIVE));
        connector.set_keepalive_retries(Some(3));
        let targets = Arc::<Targets>::default();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&targets)));
        }
        Ok(Outbound { general, connector, proxies: Arc::new(Matcher::from_system()), targets })
    }

    /// The reqwest client, for what is not a downstream MCP request (HTTP API connectors, the
    /// legacy SSE transport).
    pub fn general(&self) -> &reqwest::Client {
        &self.general
    }

    /// The target `url` names; `None` when it is no URL. A URL with a user or password goes
    /// through reqwest, which sends them as Basic authorization. Remembered: the same URL's
    /// next request reuses what was parsed, and its idle connections (up to [`TARGETS_KEPT`]
    /// URLs).
    pub fn target(&self, url: &str) -> Option<Arc<Target>> {
        if let Some(known) = self.targets.lock().unwrap_or_else(PoisonError::into_inner).get(url) {
            return Some(known.clone());
        }
        let target = Arc::new(self.parse(url)?);
        let mut targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
        if targets.len() >= TARGETS_KEPT {
            targets.clear();
        }
        targets.insert(url.into(), target.clone());
        Some(target)
    }

    fn parse(&self, url: &str) -> Option<Target> {
        let url = reqwest::Url::parse(url).ok()?;
        let direct = match url.scheme() {
            "http" if url.username().is_empty() && url.password().is_none() => {
                url.as_str().parse::<Uri>().ok().filter(|uri| self.proxies.intercept(uri).is_none()).and_then(|uri| {
                    let path = uri.path_and_query().map_or("/", |p| p.as_str()).parse().ok()?;
                    // What a client puts in Host: the port only when it is not the scheme's.
                    let host = match url.port() {
                        Some(port) => HeaderValue::try_from(format!("{}:{port}", url.host_str()?)).ok()?,
                        None => HeaderValue::try_from(url.host_str()?).ok()?,
                    };
                    Some(Direct { uri, path, host, idle: Mutex::default() })
                })
            }
            _ => None,
        };
        Some(Target { url, direct })
    }

    /// One request; its response once the head has arrived.
    pub async fn send(
        &self,
        method: Method,
        target: &Arc<Target>,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<Response, Error> {
        let Some(direct) = &target.direct else {
            let mut request = self.general.request(method, target.url.clone()).headers(headers);
            if let Some(body) = body {
                request = request.body(body);
            }
            return Ok(Response::General(request.send().await?));
        };
        let mut request = axum::http::Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = direct.path.clone();
        *request.headers_mut() = headers;
        request.headers_mut().entry(header::HOST).or_insert_with(|| direct.host.clone());
        loop {
            let (mut conn, reused) = match direct.checkout().await {
                Some(conn) => (conn, true),
                None => (self.connect(direct).await?, false),
            };
            let sent = conn.sender.try_send_request(request);
            match conn.drive(sent).await {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    let (body, conn, target) = (Some(body), Some(conn), target.clone());
                    return Ok(Response::Direct(Box::new(DirectResponse { head, body, conn, target })));
                }
                Err(mut e) => match e.take_message() {
                    // A kept connection closed before the request went out on it: the request
                    // goes on another one, as a pooled client would send it.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(described(&e.into_error())),
                },
            }
        }
    }

    /// A new connection to `direct`'s downstream, its HTTP/1 handshake done.
    async fn connect(&self, direct: &Direct) -> Result<Conn, Error> {
        let io = self.connector.clone().call(direct.uri.clone()).await.map_err(|e| described(&e))?;
        let (sender, conn) = http1::handshake(io).await.map_err(|e| described(&e))?;
        Ok(Conn { sender, conn, ended: false, idle_since: Instant::now() })
    }
}

/// Every [`SWEEP_EVERY`], closes the idle direct connections that have ended or outlived
/// [`IDLE_TIMEOUT`]: nothing polls an idle connection, so one the downstream closed would
/// otherwise stay open on this side until it is next checked out.
async fn sweep(targets: Weak<Targets>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(targets) = targets.upgrade() else { return };
        let directs: Vec<Arc<Target>> =
            targets.lock().unwrap_or_else(PoisonError::into_inner).values().filter(|t| t.direct.is_some()).cloned().collect();
        drop(targets);
        std::future::poll_fn(|cx| {
            for direct in directs.iter().filter_map(|t| t.direct.as_ref()) {
                direct.idle.lock().unwrap_or_else(PoisonError::into_inner).retain_mut(|conn| conn.usable(cx));
            }
            Poll::Ready(())
        })
        .await;
    }
}

impl Response {
    pub fn status(&self) -> StatusCode {
        match self {
            Response::Direct(r) => r.head.status,
            Response::General(r) => r.status(),
        }
    }

    pub fn headers(&self) -> &HeaderMap {
        match self {
            Response::Direct(r) => &r.head.headers,
            Response::General(r) => r.headers(),
        }
    }

    /// The body's next piece; `None` at its end (trailers are skipped).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        match self {
            Response::General(r) => Ok(r.chunk().await?),
            Response::Direct(r) => r.chunk().await,
        }
    }
}

impl DirectResponse {
    async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let Some(body) = &mut self.body else { return Ok(None) };
        loop {
            let next = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx));
            let frame = match &mut self.conn {
                Some(conn) => conn.drive(next).await,
                None => next.await,
            };
            match frame {
                None => {
                    // The answer is whole: the connection takes the next request.
                    if let (Some(conn), Some(direct)) = (self.conn.take(), &self.target.direct) {
                        direct.check_in(conn);
                    }
                    return Ok(None);
                }
                Some(Err(e)) => return Err(described(&e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_http_goes_direct_and_tls_or_userinfo_through_reqwest() {
        let outbound = Outbound::new().unwrap();
        let plain = outbound.target("http://127.0.0.1:9/mcp?x=1").unwrap();
        let direct = plain.direct.as_ref().unwrap();
        assert_eq!(direct.uri.to_string(), "http://127.0.0.1:9/mcp?x=1");
        assert_eq!((direct.path.to_string().as_str(), direct.host.to_str().unwrap()), ("/mcp?x=1", "127.0.0.1:9"));
        let default_port = outbound.target("http://localhost/").unwrap();
        let direct = default_port.direct.as_ref().unwrap();
        assert_eq!((direct.path.to_string().as_str(), direct.host.to_str().unwrap()), ("/", "localhost"));
        assert!(outbound.target("https://127.0.0.1:9/mcp").unwrap().direct.is_none());
        assert!(outbound.target("http://user:pass@127.0.0.1:9/mcp").unwrap().direct.is_none());
        assert!(outbound.target("not a url").is_none());
    }

    #[tokio::test]
    async fn a_url_is_parsed_once_and_the_memo_is_bounded() {
        let outbound = Outbound::new().unwrap();
        let first = outbound.target("http://127.0.0.1:9/mcp").unwrap();
        assert!(Arc::ptr_eq(&first, &outbound.target("http://127.0.0.1:9/mcp").unwrap()));
        assert!(!Arc::ptr_eq(&first, &outbound.target("http://127.0.0.1:9/mcp?other").unwrap()));
        for port in 0..TARGETS_KEPT {
            outbound.target(&format!("http://192.0.2.1:{port}/mcp")).unwrap();
        }
        assert!(outbound.targets.lock().unwrap().len() <= TARGETS_KEPT);
        assert!(!Arc::ptr_eq(&first, &outbound.target("http://127.0.0.1:9/mcp").unwrap()));
    }

    #[tokio::test]
    async fn a_proxied_downstream_goes_through_reqwest() {
        let mut outbound = Outbound::new().unwrap();
        outbound.proxies = Arc::new(Matcher::builder().http("http://127.0.0.1:3128").no("localhost").build());
        assert!(outbound.target("http://downstream.example/mcp").unwrap().direct.is_none());
        assert!(outbound.target("http://localhost:9/mcp").unwrap().direct.is_some());
    }

    /// Accepts one connection on `listener`, answers 200 to its request and returns the
    /// request's head (request line and headers), lower-cased.
    async fn one_request(listener: tokio::net::TcpListener) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
        String::from_utf8(head).unwrap().to_lowercase()
    }

    /// What reaches the server: the direct pool sends the origin-form request line and `Host`
    /// as reqwest does; a URL's user and password become Basic authorization (through reqwest).
    #[tokio::test]
    async fn the_server_gets_the_path_host_and_userinfo_as_authorization() {
        let outbound = Outbound::new().unwrap();
        for (url, line, authorization) in [
            ("http://127.0.0.1:{port}/mcp?x=1", "post /mcp?x=1 http/1.1", None),
            ("http://user:pass@127.0.0.1:{port}/mcp", "post /mcp http/1.1", Some("authorization: basic dxnlcjpwyxnz")),
        ] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let heard = tokio::spawn(one_request(listener));
            let target = outbound.target(&url.replace("{port}", &port.to_string())).unwrap();
            let r = outbound.send(Method::POST, &target, HeaderMap::new(), Some(Bytes::from_static(b"{}"))).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let head = heard.await.unwrap();
            assert!(head.starts_with(line), "{head}");
            assert!(head.contains(&format!("host: 127.0.0.1:{port}\r\n")), "{head}");
            assert!(head.contains("content-length: 2\r\n"), "{head}");
            assert_eq!(head.lines().find(|l| l.starts_with("authorization:")), authorization, "{head}");
        }
    }

    #[tokio::test]
    async fn a_refused_connection_says_why() {
        let outbound = Outbound::new().unwrap();
        // Bound, then dropped: nothing listens on the port.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let target = outbound.target(&format!("http://127.0.0.1:{port}/mcp?secret=s3cret")).unwrap();
        let e = outbound.send(Method::POST, &target, HeaderMap::new(), Some(Bytes::from_static(b"{}"))).await.unwrap_err();
        let text = e.to_string();
        assert!(text.contains("refused"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    /// A server on `listener` that serves each connection's requests in turn with `body`
    /// (keep-alive), and closes a connection after `per_connection` answers; it counts the
    /// connections it accepted.
    fn keep_alive_server(
        listener: tokio::net::TcpListener,
        per_connection: usize,
        body: &'static str,
    ) -> Arc<std::sync::atomic::AtomicUsize> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut socket = tokio::io::BufReader::new(socket);
                    for _ in 0..per_connection {
                        let mut length = 0;
                        loop {
                            let mut line = String::new();
                            if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                                length = n.trim().parse().unwrap();
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut request_body = vec![0; length];
                        tokio::io::AsyncReadExt::read_exact(&mut socket, &mut request_body).await.unwrap();
                        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                        if socket.get_mut().write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        accepted
    }

    /// A client, and the target of a [`keep_alive_server`] of its own, with its count of
    /// accepted connections.
    async fn serving(per_connection: usize, body: &'static str) -> (Outbound, Arc<Target>, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = keep_alive_server(listener, per_connection, body);
        let outbound = Outbound::new().unwrap();
        let target = outbound.target(&format!("http://127.0.0.1:{port}/mcp")).unwrap();
        (outbound, target, accepted)
    }

    async fn whole(outbound: &Outbound, target: &Arc<Target>) -> String {
        let mut r = outbound.send(Method::POST, target, HeaderMap::new(), Some(Bytes::from_static(b"{}"))).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let mut body = Vec::new();
        while let Some(chunk) = r.chunk().await.unwrap() {
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).unwrap()
    }

    /// A connection whose answer was read to its end takes the next request; one the
    /// downstream closed after its answer is found closed, and the next request goes on a new
    /// connection without an error.
    #[tokio::test]
    async fn connections_are_kept_and_a_closed_one_is_replaced() {
        for (per_connection, connections) in [(usize::MAX, 1), (1, 5)] {
            let (outbound, target, accepted) = serving(per_connection, "pong").await;
            for _ in 0..5 {
                assert_eq!(whole(&outbound, &target).await, "pong");
                // The server's close reaches this side before the next request is sent.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), connections, "{per_connection} per connection");
            assert!(target.direct.as_ref().unwrap().idle.lock().unwrap().len() <= 1);
        }
    }

    /// Concurrent requests each take a connection of their own, and all of them are kept.
    #[tokio::test]
    async fn concurrent_requests_use_connections_of_their_own() {
        let (outbound, target, accepted) = serving(usize::MAX, "pong").await;
        for _ in 0..3 {
            let answers = futures::future::join_all((0..8).map(|_| whole(&outbound, &target))).await;
            assert!(answers.iter().all(|a| a == "pong"));
        }
        let accepted = accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=8).contains(&accepted), "{accepted} connections");
        assert_eq!(target.direct.as_ref().unwrap().idle.lock().unwrap().len(), accepted);
    }

    /// A response dropped before its body ended closes its connection: the next request
    /// opens another, and reads its own answer, not the rest of the first.
    #[tokio::test]
    async fn a_response_dropped_early_closes_its_connection() {
        let long: &'static str = "x".repeat(1 << 20).leak();
        let (outbound, target, accepted) = serving(usize::MAX, long).await;
        let mut first = outbound.send(Method::POST, &target, HeaderMap::new(), Some(Bytes::from_static(b"{}"))).await.unwrap();
        assert!(first.chunk().await.unwrap().is_some());
        drop(first);
        assert_eq!(whole(&outbound, &target).await.len(), long.len());
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// A response dropped once its body has arrived, before its end was read (a client that
    /// stops at the message it waited for), leaves its connection for the next request.
    #[tokio::test]
    async fn a_response_dropped_after_its_body_arrived_keeps_its_connection() {
        let (outbound, target, accepted) = serving(usize::MAX, "pong").await;
        for _ in 0..3 {
            let mut r = outbound.send(Method::POST, &target, HeaderMap::new(), Some(Bytes::from_static(b"{}"))).await.unwrap();
            assert_eq!(r.chunk().await.unwrap().as_deref(), Some(&b"pong"[..]));
        }
        assert_eq!(whole(&outbound, &target).await, "pong");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
