//! A 2026-07-28 agent calling a tool of a downstream that speaks only the handshake era. Such
//! a downstream asks for input (sampling, elicitation, roots) with a request on the call's
//! response stream, and waits; a 2026-07-28 agent reads no such stream, it answers an
//! `InputRequiredResult` and retries. The gateway translates by replaying the call:
//!
//! 1. The call goes down as usual. The downstream's first request that no earlier round
//!    answered is kept, and the downstream is refused it (-32603, which ends the call there);
//!    the agent gets an `InputRequiredResult` asking that one request (`r0`, `r1`, … in the
//!    order asked), and a `requestState` sealed by the gateway that carries the answers so far.
//! 2. The retry, on any replica, makes the call again from the start. The downstream's requests
//!    are answered from the state's answers and the retry's `inputResponses`, in the order
//!    asked, without reaching the agent; a further request starts another round.
//!
//! The downstream so runs the tool once per round, up to the point where it asks: a tool that
//! acts before it asks acts again on each round (docs/decisions.md). A request of a capability
//! the agent did not declare is refused to the downstream with -32601 at once, as on the
//! handshake era.

use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

use serde_json::{Value, json};

use super::asks::refusal;

/// The answers of earlier rounds, and the request that needs the agent now.
pub struct Replay {
    answers: Vec<Value>,
    next: AtomicUsize,
    capabilities: Value,
    asked: Mutex<Option<Value>>,
}

/// The capability an agent must have declared to be sent a downstream's request.
fn capability(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

impl Replay {
    /// A round with the answers so far: the sealed state's, then the retry's answer to the
    /// last request asked (`inputResponses["r{n}"]`, where n answers came before).
    pub fn new(mut answers: Vec<Value>, responses: Option<&Value>, capabilities: &Value) -> Replay {
        if let Some(answer) = responses.and_then(|r| r.get(format!("r{}", answers.len()))) {
            answers.push(answer.clone());
        }
        Replay { answers, next: AtomicUsize::new(0), capabilities: capabilities.clone(), asked: Mutex::new(None) }
    }

    /// The JSON-RPC response the downstream gets for its `request`.
    pub fn answer(&self, request: &Value) -> Value {
        let id = request.get("id").unwrap_or(&Value::Null);
        let method = request["method"].as_str().unwrap_or_default();
        let declared = capability(method).is_some_and(|c| self.capabilities.get(c).is_some_and(|v| !v.is_null()));
        if !declared {
            return refusal(id, -32601, "Method not found: the agent did not declare this capability");
        }
        let turn = self.next.fetch_add(1, Ordering::SeqCst);
        if let Some(answer) = self.answers.get(turn) {
            return json!({ "jsonrpc": "2.0", "id": id, "result": answer });
        }
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.is_none() {
            let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            *asked = Some(json!({ "method": method, "params": params }));
        }
        refusal(id, -32603, "the gateway is asking the agent for this input; the call will be made again with its answer")
    }

    /// The request the agent must answer, if the downstream asked one no round answered.
    pub fn asked(&self) -> Option<Value> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The answers so far (for the next round's sealed state).
    pub fn answers(&self) -> Vec<Value> {
        self.answers.clone()
    }

    /// The `inputRequests` of the next round: the one request asked, under its turn.
    pub fn input_requests(&self, asked: Value) -> Value {
        json!({ format!("r{}", self.answers.len()): asked })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Replay;

    fn request(id: i64, method: &str) -> serde_json::Value {
        json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": { "n": id } })
    }

    #[test]
    fn earlier_answers_are_given_in_order_and_the_first_new_request_is_kept() {
        let caps = json!({ "sampling": {}, "elicitation": {} });
        let replay = Replay::new(vec![json!({ "a": 0 })], Some(&json!({ "r1": { "a": 1 }, "r0": { "ignored": true } })), &caps);
        assert_eq!(replay.answer(&request(7, "sampling/createMessage"))["result"], json!({ "a": 0 }));
        assert_eq!(replay.answer(&request(8, "elicitation/create"))["result"], json!({ "a": 1 }));
        assert_eq!(replay.asked(), None);
        let refused = replay.answer(&request(9, "sampling/createMessage"));
        assert_eq!((refused["id"].clone(), refused["error"]["code"].clone()), (json!(9), json!(-32603)));
        // Only the first unanswered request is asked this round.
        replay.answer(&request(10, "elicitation/create"));
        let asked = replay.asked().unwrap();
        assert_eq!(asked, json!({ "method": "sampling/createMessage", "params": { "n": 9 } }));
        assert_eq!(replay.input_requests(asked.clone()), json!({ "r2": asked }));
        assert_eq!(replay.answers().len(), 2);
    }

    #[test]
    fn an_undeclared_capability_or_unknown_method_is_refused_and_never_asked() {
        let replay = Replay::new(Vec::new(), None, &json!({ "sampling": {} }));
        assert_eq!(replay.answer(&request(1, "roots/list"))["error"]["code"], -32601);
        assert_eq!(replay.answer(&request(2, "tools/call"))["error"]["code"], -32601);
        assert_eq!(replay.asked(), None);
    }
}
