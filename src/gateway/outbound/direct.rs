//! A plain-HTTP downstream's kept-alive HTTP/1 connections, driven by their caller: the
//! request that takes a connection polls it, from sending the request to the last byte of the
//! answer, then gives it back (`docs/decisions.md`, "Downstream connections driven by their
//! caller"). Nothing else polls a connection, except [`sweep`] while it is idle.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, Weak},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::{Body as _, Incoming},
    client::conn::http1,
};
use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioIo};
use tower::Service as _;

use super::{Error, IDLE_TIMEOUT, Targets, described};

/// Idle connections kept per downstream URL; one more is closed when its answer ends.
const IDLE_KEPT: usize = 128;
/// How often idle connections are looked at: a downstream may have closed them, or they may
/// have been idle for longer than [`IDLE_TIMEOUT`].
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// A plain-HTTP downstream's request line target and `Host`, and its idle connections.
#[derive(Debug)]
pub(super) struct Direct {
    /// The URL, for the connector.
    pub(super) uri: Uri,
    /// The origin-form request target (`/mcp?x=1`).
    pub(super) path: Uri,
    pub(super) host: HeaderValue,
    /// Boxed: a connection is hundreds of bytes, moved out of and back into this list, and
    /// into each response, on every request.
    #[allow(clippy::vec_box)]
    idle: Mutex<Vec<Box<Conn>>>,
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
    /// Requests to `url` (parsed as `uri`), unless its host cannot be a header.
    pub(super) fn new(url: &reqwest::Url, uri: Uri) -> Option<Direct> {
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).parse().ok()?;
        // What a client puts in Host: the port only when it is not the scheme's.
        let host = match url.port() {
            Some(port) => HeaderValue::try_from(format!("{}:{port}", url.host_str()?)).ok()?,
            None => HeaderValue::try_from(url.host_str()?).ok()?,
        };
        Some(Direct { uri, path, host, idle: Mutex::default() })
    }

    /// One request; its response once the head has arrived.
    pub(super) async fn send(
        self: &Arc<Self>,
        connector: &HttpConnector,
        method: Method,
        headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<DirectResponse, Error> {
        let mut request = axum::http::Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = self.path.clone();
        *request.headers_mut() = headers;
        request.headers_mut().entry(header::HOST).or_insert_with(|| self.host.clone());
        loop {
            let (mut conn, reused) = match self.checkout().await {
                Some(conn) => (conn, true),
                None => (self.connect(connector).await?, false),
            };
            let sent = conn.sender.try_send_request(request);
            match conn.drive(sent).await {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    return Ok(DirectResponse { head, body: Some(body), conn: Some(conn), direct: self.clone() });
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

    /// A new connection to the downstream, its HTTP/1 handshake done.
    async fn connect(&self, connector: &HttpConnector) -> Result<Box<Conn>, Error> {
        let io = connector.clone().call(self.uri.clone()).await.map_err(|e| described(&e))?;
        let (sender, conn) = http1::handshake(io).await.map_err(|e| described(&e))?;
        Ok(Box::new(Conn { sender, conn, ended: false, idle_since: Instant::now() }))
    }

    /// A usable idle connection, newest first; those found unusable are closed.
    async fn checkout(&self) -> Option<Box<Conn>> {
        loop {
            let mut conn = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop()?;
            if std::future::poll_fn(|cx| Poll::Ready(conn.usable(cx))).await {
                return Some(conn);
            }
        }
    }

    /// Closes the idle connections that have ended or outlived [`IDLE_TIMEOUT`] ([`sweep`]):
    /// each is polled once, without waiting.
    async fn close_unusable(&self) {
        std::future::poll_fn(|cx| {
            self.idle.lock().unwrap_or_else(PoisonError::into_inner).retain_mut(|conn| conn.usable(cx));
            Poll::Ready(())
        })
        .await
    }

    /// Keeps `conn` for the next request, if it is still open and there is room.
    fn check_in(&self, mut conn: Box<Conn>) {
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

/// A response on a direct connection, which reading the body drives. The connection goes
/// back to its target once the body has ended. A response dropped before that (a client that
/// has the message it waited for on an event stream stops reading) keeps its connection only
/// if the rest of the body has already arrived, as hyper's pooled client would.
#[derive(Debug)]
pub struct DirectResponse {
    head: axum::http::response::Parts,
    /// Taken when the response is dropped, so the connection can drain the rest.
    body: Option<Incoming>,
    conn: Option<Box<Conn>>,
    direct: Arc<Direct>,
}

impl Drop for DirectResponse {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        drop(self.body.take());
        // Polled without waiting: the connection reads what has already arrived of the
        // dropped body and discards it, or closes if more is due (hyper's own rule).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if conn.open(&mut cx) {
            self.direct.check_in(conn);
        }
    }
}

impl DirectResponse {
    pub(super) fn head(&self) -> &axum::http::response::Parts {
        &self.head
    }

    /// The body's next piece; `None` at its end (trailers are skipped).
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
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
                    if let Some(conn) = self.conn.take() {
                        self.direct.check_in(conn);
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

/// Every [`SWEEP_EVERY`], closes the idle connections that have ended or outlived
/// [`IDLE_TIMEOUT`]: nothing polls an idle connection, so one the downstream closed would
/// otherwise stay open on this side until it is next checked out.
pub(super) async fn sweep(targets: Weak<Targets>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(targets) = targets.upgrade() else { return };
        let directs: Vec<Arc<Direct>> =
            targets.lock().unwrap_or_else(PoisonError::into_inner).values().filter_map(|t| t.direct.clone()).collect();
        drop(targets);
        for direct in directs {
            direct.close_unusable().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::StatusCode;

    use super::{
        super::{Outbound, Target},
        *,
    };

    /// A server on `listener` that serves each connection's requests in turn with `body`
    /// (keep-alive), and closes a connection after `per_connection` answers; it counts the
    /// connections it accepted.
    fn keep_alive_server(listener: tokio::net::TcpListener, per_connection: usize, body: &'static str) -> Arc<AtomicUsize> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, Ordering::SeqCst);
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
    async fn serving(per_connection: usize, body: &'static str) -> (Outbound, Arc<Target>, Arc<AtomicUsize>) {
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
            assert_eq!(accepted.load(Ordering::SeqCst), connections, "{per_connection} per connection");
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
        let accepted = accepted.load(Ordering::SeqCst);
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
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
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
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// The sweep keeps an idle connection that is open, and closes it once the downstream
    /// has closed it.
    #[tokio::test]
    async fn the_sweep_closes_idle_connections_the_downstream_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (close, closing) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n{}") {
                let mut byte = [0u8; 1];
                socket.read_exact(&mut byte).await.unwrap();
                request.push(byte[0]);
            }
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\npong").await.unwrap();
            let _ = closing.await;
        });
        let outbound = Outbound::new().unwrap();
        let target = outbound.target(&format!("http://127.0.0.1:{port}/mcp")).unwrap();
        assert_eq!(whole(&outbound, &target).await, "pong");
        let direct = target.direct.as_ref().unwrap();
        direct.close_unusable().await;
        assert_eq!(direct.idle.lock().unwrap().len(), 1, "an open connection is kept");
        drop(close);
        // The server's close reaches this side before the sweep looks again.
        tokio::time::sleep(Duration::from_millis(50)).await;
        direct.close_unusable().await;
        assert_eq!(direct.idle.lock().unwrap().len(), 0, "a closed connection is closed here too");
    }
}
