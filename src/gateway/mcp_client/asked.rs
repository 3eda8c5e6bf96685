//! A server's requests to the agent that belong to no request of ours: sent on the session's
//! GET stream instead of a call's response stream (the TypeScript SDK's server does so when a
//! tool asks without naming the call it serves). A pooled session listens on its GET stream
//! from its start ([`HttpSession::listen_for_asks`]); a request that arrives there while a
//! call whose agent can be asked holds the session (an exclusive lease: it is the only call
//! on it that could have caused the ask) goes to that agent, like one on the call's own
//! stream. With no such call, `ping` is answered and anything else refused, as an agent
//! without the capability would.

use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;

use super::{HttpSession, MAX_RESPONSE_BYTES};
use crate::gateway::{sse::EventParser, upstream::Upstream};

/// Times in a row the GET stream may fail to open or end at once before the listener stops.
const MAX_FAILURES: u32 = 3;
/// The wait before reopening an ended stream whose server named no `retry` time.
const REOPEN: std::time::Duration = std::time::Duration::from_secs(1);

/// Who answers the server's requests on the session's GET stream, and the listener.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// The agent of the call holding the session, with the hold's number.
    agent: Mutex<Option<(u64, Upstream)>>,
    holds: std::sync::atomic::AtomicU64,
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Asked {
    fn agent(&self) -> std::sync::MutexGuard<'_, Option<(u64, Upstream)>> {
        self.agent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `upstream` answers the server's GET-stream requests until the returned hold is dropped.
    pub(super) fn hold(&self, upstream: &Upstream) -> Hold<'_> {
        let number = self.holds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.agent() = Some((number, upstream.clone()));
        Hold { asked: self, number }
    }

    /// Stops the listener (the session is closed).
    pub(super) fn stop(&self) {
        if let Some(task) = self.listener.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

/// A call's hold on the session's GET-stream requests; released when dropped.
pub(super) struct Hold<'a> {
    asked: &'a Asked,
    number: u64,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut agent = self.asked.agent();
        if agent.as_ref().is_some_and(|(n, _)| *n == self.number) {
            *agent = None;
        }
    }
}

impl HttpSession {
    /// Starts listening on the session's GET stream for the server's requests (a session the
    /// server gave an id; a server without such a stream answers 405 and is not asked again).
    pub fn listen_for_asks(self: &Arc<Self>) {
        if !self.has_session_id() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let task = runtime.spawn(listen(Arc::downgrade(self)));
        *self.asked.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
    }
}

/// Holds no strong reference while it waits, so a session nobody uses any more is closed
/// (its `close` stops this task, and the server ends the stream when the session is deleted).
async fn listen(session: Weak<HttpSession>) {
    let mut failures = 0;
    let mut parser = EventParser::new(MAX_RESPONSE_BYTES);
    loop {
        let Some(strong) = session.upgrade() else { return };
        let opened = strong.open_stream_after(parser.last_event_id()).await;
        drop(strong);
        let mut stream = match opened {
            Ok(Some(stream)) => stream,
            Ok(None) => return,
            Err(f) => {
                tracing::debug!(failure = ?f, "a downstream session's GET stream did not open");
                failures += 1;
                if failures >= MAX_FAILURES {
                    return;
                }
                tokio::time::sleep(REOPEN * failures).await;
                continue;
            }
        };
        parser = parser.resumed();
        let mut heard = false;
        let mut events = std::collections::VecDeque::new();
        while let Ok(Some(chunk)) = stream.chunk().await {
            if parser.feed(&chunk, &mut events).is_err() {
                return;
            }
            while let Some(event) = events.pop_front() {
                heard = true;
                let Ok(message) = serde_json::from_str::<Value>(&event.data) else { continue };
                if event.kind == "message" && message.get("method").is_some() && message.get("id").is_some() {
                    tokio::spawn(answer(session.clone(), message));
                }
            }
        }
        failures = if heard { 0 } else { failures + 1 };
        if failures >= MAX_FAILURES {
            return;
        }
        tokio::time::sleep(parser.retry().unwrap_or(REOPEN)).await;
    }
}

/// One request from the GET stream: to the agent of the call holding the session, if any.
async fn answer(session: Weak<HttpSession>, request: Value) {
    let agent = match request["method"].as_str() {
        Some("ping") => None,
        _ => session.upgrade().and_then(|s| s.asked.agent().as_ref().map(|(_, upstream)| upstream.clone())),
    };
    let answered = match agent {
        Some(upstream) => Some(upstream.downstream_request(request.clone()).await),
        None => None,
    };
    let Some(session) = session.upgrade() else { return };
    match answered {
        Some(answer) => session.send_answer(&answer).await,
        None => session.answer_unattended(&request).await,
    }
}
