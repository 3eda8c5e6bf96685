//! The legacy HTTP+SSE client transport (MCP 2024-11-05), for downstreams that never moved to
//! streamable HTTP. rmcp 3.11 dropped its own, so this is ours: one long GET whose first event
//! names the URI to POST to, then every server message as an `event: message`.
//!
//! It is an rmcp [`Transport`], so `ClientConfig::serve` drives it exactly like the streamable
//! one. A closed stream is a closed transport (the session is then dropped and the next call
//! reconnects); there is no resumption, which the legacy protocol does not define.

use std::collections::VecDeque;

use axum::{
    body::Bytes,
    http::{HeaderMap, HeaderValue, header},
};
use futures::{StreamExt, stream::BoxStream};
use rmcp::{
    RoleClient,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use url::Url;

/// The most one event may hold (its data, its type and the line being read), as rmcp bounds
/// its own streamable client's events.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Why the legacy SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("the SSE URL is not a URL")]
    BadUrl,
    #[error("the downstream answered HTTP {0}")]
    Status(u16),
    #[error("the SSE URL answered {0:?}, not text/event-stream")]
    NotEventStream(String),
    #[error("the event stream ended before its endpoint event")]
    NoEndpoint,
    #[error("the endpoint event names {0:?}, not a URI on the SSE URL's origin")]
    ForeignEndpoint(String),
    #[error("an event exceeded {0} bytes")]
    EventTooLarge(usize),
}

/// One dispatched server-sent event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The `event` field; `message` when the event named none.
    pub kind: String,
    /// The `data` fields, joined by newlines.
    pub data: String,
}

/// An incremental `text/event-stream` parser (the WHATWG algorithm). Lines end in CR, LF or
/// CRLF, even when a CRLF is split across chunks, so how the bytes are chunked never changes
/// the events. `id` and `retry` serve reconnection: [`EventParser::last_event_id`] and
/// [`EventParser::retry`] say what a client resuming the stream sends and waits.
#[derive(Debug)]
pub struct EventParser {
    max_event_bytes: usize,
    line: Vec<u8>,
    kind: Vec<u8>,
    data: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF in the next one ends nothing.
    after_cr: bool,
    /// The first line has ended (only it may start with a byte order mark).
    first_line_done: bool,
    /// An event grew too large; the stream is unusable from there on.
    failed: bool,
    /// The `id` field of the event being read, and the last event ID (set when an event ends).
    id: Option<Vec<u8>>,
    last_id: Option<String>,
    /// The reconnection time the server asked for (`retry`), in milliseconds.
    retry: Option<u64>,
}

impl EventParser {
    pub fn new(max_event_bytes: usize) -> Self {
        EventParser {
            max_event_bytes,
            line: Vec::new(),
            kind: Vec::new(),
            data: Vec::new(),
            after_cr: false,
            first_line_done: false,
            failed: false,
            id: None,
            last_id: None,
            retry: None,
        }
    }

    /// The last event ID the stream set (an `id` field of an event that ended; an empty one
    /// clears it): what a client resuming the stream sends as `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// A parser for the stream that resumes this one: nothing of a partly read event carries
    /// over, the last event ID and the reconnection time do.
    pub fn resumed(&self) -> EventParser {
        EventParser { last_id: self.last_id.clone(), retry: self.retry, ..EventParser::new(self.max_event_bytes) }
    }

    /// How long the server asked a client to wait before reconnecting (`retry`).
    pub fn retry(&self) -> Option<std::time::Duration> {
        self.retry.map(std::time::Duration::from_millis)
    }

    /// Parses `chunk`, appending every event it completes to `out`. After an oversize event it
    /// fails, now and on every later chunk; the events completed before it are in `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut VecDeque<Event>) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::EventTooLarge(self.max_event_bytes));
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut self.after_cr) && chunk[0] == b'\n' {
            chunk = &chunk[1..];
        }
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&chunk[..end])?;
            self.end_line(out);
            let crlf = chunk[end] == b'\r' && chunk.get(end + 1) == Some(&b'\n');
            self.after_cr = chunk[end] == b'\r' && end + 1 == chunk.len();
            chunk = &chunk[end + if crlf { 2 } else { 1 }..];
        }
        self.extend_line(chunk)
    }

    /// Within a line the retained size only grows, and ending a line never grows it, so
    /// checking after each piece fails at the same byte however the stream is chunked.
    fn extend_line(&mut self, piece: &[u8]) -> Result<(), SseError> {
        self.line.extend_from_slice(piece);
        if self.line.len() + self.kind.len() + self.data.len() > self.max_event_bytes {
            self.failed = true;
            self.line = Vec::new();
            self.kind = Vec::new();
            self.data = Vec::new();
            return Err(SseError::EventTooLarge(self.max_event_bytes));
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut VecDeque<Event>) {
        let mut line: &[u8] = &self.line;
        if !std::mem::replace(&mut self.first_line_done, true) {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.is_empty() {
            if let Some(id) = self.id.take() {
                self.last_id = (!id.is_empty()).then(|| String::from_utf8_lossy(&id).into_owned());
            }
            if !self.data.is_empty() {
                self.data.pop(); // the newline after the last data field
                let kind = if self.kind.is_empty() { "message".into() } else { String::from_utf8_lossy(&self.kind).into_owned() };
                out.push_back(Event { kind, data: String::from_utf8_lossy(&self.data).into_owned() });
            }
            self.kind.clear();
            self.data.clear();
        } else if line[0] != b':' {
            let (name, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => (&line[..colon], &line[colon + 1..]),
                None => (line, &[][..]),
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match name {
                b"event" => self.kind = value.to_vec(),
                b"data" => {
                    self.data.extend_from_slice(value);
                    self.data.push(b'\n');
                }
                b"id" if !value.contains(&0) => self.id = Some(value.to_vec()),
                b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                    if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                        self.retry = Some(ms);
                    }
                }
                _ => {}
            }
        }
        self.line.clear();
    }
}

/// The URI an `endpoint` event names, resolved against the SSE URL; refused unless it is on
/// the SSE URL's origin, so a downstream cannot point the gateway's POSTs (with the
/// connector's headers) at another host.
pub fn resolve_endpoint(sse_url: &Url, data: &str) -> Result<Url, SseError> {
    let foreign = || SseError::ForeignEndpoint(data.chars().take(200).collect());
    let endpoint = sse_url.join(data.trim()).map_err(|_| foreign())?;
    if endpoint.origin() != sse_url.origin() {
        return Err(foreign());
    }
    Ok(endpoint)
}

/// A legacy SSE session with one downstream: the open event stream and the URI to POST to.
pub struct SseClientTransport {
    http: reqwest::Client,
    headers: HeaderMap,
    endpoint: Url,
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: EventParser,
    ready: VecDeque<Event>,
    closed: bool,
}

impl SseClientTransport {
    /// Opens the event stream at `url` with the connector's `headers` and waits for its
    /// endpoint event. The caller bounds the wait (a silent downstream never sends one).
    pub async fn connect(http: reqwest::Client, url: &str, headers: HeaderMap) -> Result<Self, SseError> {
        let sse_url = Url::parse(url).map_err(|_| SseError::BadUrl)?;
        let response = http
            .get(sse_url.clone())
            .headers(headers.clone())
            .header(header::ACCEPT, HeaderValue::from_static("text/event-stream"))
            .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(SseError::Status(response.status().as_u16()));
        }
        let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !content_type.trim_start().to_ascii_lowercase().starts_with("text/event-stream") {
            return Err(SseError::NotEventStream(content_type.chars().take(100).collect()));
        }
        let mut transport = SseClientTransport {
            http,
            headers,
            endpoint: sse_url.clone(),
            body: response.bytes_stream().boxed(),
            parser: EventParser::new(MAX_EVENT_BYTES),
            ready: VecDeque::new(),
            closed: false,
        };
        loop {
            // Nothing precedes the endpoint event in the protocol; anything that does is dropped.
            while let Some(event) = transport.ready.pop_front() {
                if event.kind == "endpoint" {
                    transport.endpoint = resolve_endpoint(&sse_url, &event.data)?;
                    return Ok(transport);
                }
            }
            match transport.body.next().await {
                Some(Ok(chunk)) => transport.parser.feed(&chunk, &mut transport.ready)?,
                Some(Err(e)) => return Err(e.into()),
                None => return Err(SseError::NoEndpoint),
            }
        }
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = SseError;

    /// One POST per message; rmcp runs sends concurrently, as the legacy protocol allows.
    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let request = self.http.post(self.endpoint.clone()).headers(self.headers.clone()).json(&item);
        async move {
            let response = request.send().await?;
            if !response.status().is_success() {
                return Err(SseError::Status(response.status().as_u16()));
            }
            Ok(())
        }
    }

    /// Cancellation-safe: the only await is the body stream's `next`, and every event it
    /// completes is kept in `ready` before the next await.
    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            while let Some(event) = self.ready.pop_front() {
                if event.kind != "message" {
                    continue;
                }
                match serde_json::from_str(&event.data) {
                    Ok(message) => return Some(message),
                    Err(e) => tracing::warn!(error = %e, "legacy SSE downstream sent an event that is not JSON-RPC; skipped"),
                }
            }
            if self.closed {
                return None;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    if let Err(e) = self.parser.feed(&chunk, &mut self.ready) {
                        tracing::warn!(error = %e, "legacy SSE downstream stream refused");
                        self.closed = true;
                    }
                }
                Some(Err(e)) => {
                    tracing::info!(error = %e, "legacy SSE downstream stream broke");
                    self.closed = true;
                }
                None => self.closed = true,
            }
        }
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.closed = true;
        self.ready.clear();
        self.body = futures::stream::empty().boxed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The events of `chunks`, and whether the parser failed (it stops at the first failure).
    fn parse(chunks: &[&[u8]], max: usize) -> (Vec<Event>, bool) {
        let mut parser = EventParser::new(max);
        let mut out = VecDeque::new();
        for chunk in chunks {
            if parser.feed(chunk, &mut out).is_err() {
                return (out.into(), true);
            }
        }
        (out.into(), false)
    }

    fn event(kind: &str, data: &str) -> Event {
        Event { kind: kind.into(), data: data.into() }
    }

    #[test]
    fn endpoint_then_messages() {
        let stream = b"event: endpoint\ndata: /message?sessionId=abc\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\"}\n\n";
        let (events, failed) = parse(&[stream], MAX_EVENT_BYTES);
        assert!(!failed);
        assert_eq!(events, [event("endpoint", "/message?sessionId=abc"), event("message", "{\"jsonrpc\":\"2.0\"}")]);
    }

    #[test]
    fn multi_line_data_comments_crlf_and_defaults() {
        let stream =
            b": keepalive\r\n\r\ndata:{\"a\":\r\ndata:  1}\r\n\r\n:ping\rdata\revent:x\r\rretry: 5\nid: 7\ndata: last\n\n";
        let (events, _) = parse(&[stream], MAX_EVENT_BYTES);
        assert_eq!(events, [event("message", "{\"a\":\n 1}"), event("x", ""), event("message", "last")]);
    }

    #[test]
    fn no_data_no_event_and_an_unfinished_event_is_not_dispatched() {
        let (events, _) = parse(&[b"event: endpoint\n\n\n\ndata: half"], MAX_EVENT_BYTES);
        assert!(events.is_empty());
    }

    #[test]
    fn a_crlf_split_across_chunks_ends_one_line() {
        let (events, _) = parse(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], MAX_EVENT_BYTES);
        assert_eq!(events, [event("message", "a\nb")]);
    }

    #[test]
    fn a_leading_byte_order_mark_is_ignored_once() {
        let (events, _) = parse(&["\u{feff}data: x\n\n\u{feff}data: y\n\n".as_bytes()], MAX_EVENT_BYTES);
        assert_eq!(events, [event("message", "x")], "a later BOM makes an unknown field");
    }

    #[test]
    fn an_oversize_event_fails_and_keeps_failing() {
        let mut parser = EventParser::new(16);
        let mut out = VecDeque::new();
        parser.feed(b"data: small\n\n", &mut out).unwrap();
        assert!(matches!(parser.feed(b"data: 0123456789abcdef\n", &mut out), Err(SseError::EventTooLarge(16))));
        assert!(parser.feed(b"\n", &mut out).is_err());
        assert_eq!(Vec::from(out), [event("message", "small")]);
        let (_, failed) = parse(&[b"data: 0123\n", b"data: 4567\n", b"data: 89\n"], 16);
        assert!(failed, "many small data lines still make one event");
        let (_, failed) = parse(&[b": a very long comment line\n"], 16);
        assert!(failed);
    }

    #[test]
    fn the_last_event_id_and_retry_serve_a_resumption() {
        let mut parser = EventParser::new(MAX_EVENT_BYTES);
        let mut out = VecDeque::new();
        assert_eq!((parser.last_event_id(), parser.retry()), (None, None));
        // A priming event: an id and a retry time, empty data (dispatched, as WHATWG says).
        parser.feed(b"id: event-1\nretry: 500\ndata: \n\n", &mut out).unwrap();
        assert_eq!(parser.last_event_id(), Some("event-1"));
        assert_eq!(parser.retry(), Some(std::time::Duration::from_millis(500)));
        // An event without an id keeps the last one; a malformed retry changes nothing; an id
        // counts only once its event ends.
        parser.feed(b"retry: 5x\ndata: a\n\nid: event-2\ndata: b", &mut out).unwrap();
        assert_eq!(parser.last_event_id(), Some("event-1"));
        assert_eq!(parser.retry(), Some(std::time::Duration::from_millis(500)));
        parser.feed(b"\n\n", &mut out).unwrap();
        assert_eq!(parser.last_event_id(), Some("event-2"));
        // An id with a NUL is ignored; an empty one clears the last id.
        parser.feed(b"id: x\0y\ndata: c\n\n", &mut out).unwrap();
        assert_eq!(parser.last_event_id(), Some("event-2"));
        let resumed = parser.resumed();
        assert_eq!((resumed.last_event_id(), resumed.retry()), (Some("event-2"), Some(std::time::Duration::from_millis(500))));
        parser.feed(b"id\ndata: d\n\n", &mut out).unwrap();
        assert_eq!(parser.last_event_id(), None);
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn endpoints_resolve_on_the_same_origin_only() {
        let sse = Url::parse("http://127.0.0.1:3001/sse").unwrap();
        assert_eq!(resolve_endpoint(&sse, "/message?sessionId=1").unwrap().as_str(), "http://127.0.0.1:3001/message?sessionId=1");
        assert_eq!(resolve_endpoint(&sse, " messages \n").unwrap().as_str(), "http://127.0.0.1:3001/messages");
        assert!(resolve_endpoint(&sse, "http://127.0.0.1:3001/m").is_ok());
        for foreign in ["http://evil.example/m", "//evil.example/m", "https://127.0.0.1:3001/m", "http://127.0.0.1:3002/m"] {
            assert!(matches!(resolve_endpoint(&sse, foreign), Err(SseError::ForeignEndpoint(_))), "{foreign}");
        }
    }

    /// Bytes that look like an event stream often enough to make events, and anything else.
    fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"data:".to_vec()),
            Just(b"data: ".to_vec()),
            Just(b"event: endpoint".to_vec()),
            Just(b"event:".to_vec()),
            Just(b":".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\r\n".to_vec()),
            Just("\u{feff}".as_bytes().to_vec()),
            "[a-z{}\" ]{0,6}".prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..4),
        ];
        prop::collection::vec(piece, 0..64).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn chunking_never_changes_the_events(
            bytes in stream_bytes(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            max in prop_oneof![Just(MAX_EVENT_BYTES), 1usize..48],
        ) {
            let whole = parse(&[&bytes], max);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.extend([0, bytes.len()]);
            at.sort_unstable();
            let chunks: Vec<&[u8]> = at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
            prop_assert_eq!(parse(&chunks, max), whole.clone());
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            prop_assert_eq!(parse(&bytewise, max), whole);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), max in 1usize..4096) {
            let (events, _) = parse(&[&bytes], max);
            prop_assert!(events.iter().all(|e| e.data.len() <= 4 * max));
        }

        #[test]
        fn written_events_parse_back(events in prop::collection::vec(("[a-z]{0,8}", "\\PC{0,40}"), 0..8), crlf in any::<bool>()) {
            let newline = if crlf { "\r\n" } else { "\n" };
            let mut text = String::new();
            for (kind, data) in &events {
                if !kind.is_empty() {
                    text.push_str(&format!("event: {kind}{newline}"));
                }
                text.push_str(&format!(": keepalive{newline}data: {data}{newline}{newline}"));
            }
            let (parsed, failed) = parse(&[text.as_bytes()], MAX_EVENT_BYTES);
            prop_assert!(!failed);
            let expected: Vec<Event> = events
                .iter()
                .map(|(k, d)| event(if k.is_empty() { "message" } else { k }, d))
                .collect();
            prop_assert_eq!(parsed, expected);
        }
    }
}
