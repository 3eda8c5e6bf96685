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
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::http::{HeaderMap, Method, StatusCode, Uri};
use bytes::Bytes;
use hyper_util::client::{legacy::connect::HttpConnector, proxy::matcher::Matcher};

mod direct;

use direct::Direct;
pub use direct::DirectResponse;

/// How long opening a connection to a downstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle pooled connection is kept (reqwest's default, for both pools).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// TCP keepalive: idle time before the first probe and between probes (reqwest's default).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How many downstream URLs' targets are kept parsed; past that the memo starts afresh.
const TARGETS_KEPT: usize = 1024;

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
    direct: Option<Arc<Direct>>,
}

/// A downstream's response, from either pool.
#[derive(Debug)]
pub enum Response {
    Direct(Box<DirectResponse>),
    General(reqwest::Response),
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
            runtime.spawn(direct::sweep(Arc::downgrade(&targets)));
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
            "http" if url.username().is_empty() && url.password().is_none() => url
                .as_str()
                .parse::<Uri>()
                .ok()
                .filter(|uri| self.proxies.intercept(uri).is_none())
                .and_then(|uri| Direct::new(&url, uri))
                .map(Arc::new),
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
        Ok(Response::Direct(Box::new(direct.send(&self.connector, method, headers, body).await?)))
    }
}

impl Response {
    pub fn status(&self) -> StatusCode {
        match self {
            Response::Direct(r) => r.head().status,
            Response::General(r) => r.status(),
        }
    }

    pub fn headers(&self) -> &HeaderMap {
        match self {
            Response::Direct(r) => &r.head().headers,
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
}
