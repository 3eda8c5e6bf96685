//! A hostile MCP downstream on loopback: plain HTTP/1.1 written byte by byte over a TCP
//! socket, so each misbehaviour is exactly what a broken or malicious server would send. The
//! scenario is the URL's path (`/reset`, `/huge`, …); `initialize` and
//! `notifications/initialized` are answered normally on every path, and the scenario strikes
//! at `tools/list` (catalog scenarios) or `tools/call` (the others). `/ok` is a well-behaved
//! server with one `echo` tool.
#![allow(dead_code)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Every scenario the peer plays, by path.
pub const SCENARIOS: &[&str] = &[
    "reset",
    "endless_sse",
    "endless_event",
    "huge",
    "bad_json",
    "bad_utf8",
    "wrong_id",
    "slow",
    "redirect",
    "many_tools",
    "big_descriptions",
    "bad_schema",
];

pub struct Hostile {
    pub base: String,
    /// Connections the redirect's target (another host, 127.0.0.2) received.
    pub redirected: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Hostile {
    pub async fn start() -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // The redirect points at another host; it only counts who comes.
        let trap = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let trap_url = format!("http://127.0.0.2:{}/ok", trap.local_addr().unwrap().port());
        let redirected = Arc::new(AtomicUsize::new(0));
        let counted = redirected.clone();
        let trap_task = tokio::spawn(async move {
            while let Ok((_socket, _)) = trap.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        let serve_task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let trap_url = trap_url.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, &trap_url).await;
                });
            }
        });
        Hostile { base: format!("http://127.0.0.1:{port}"), redirected, tasks: vec![trap_task, serve_task] }
    }

    pub fn url(&self, scenario: &str) -> String {
        format!("{}/{scenario}", self.base)
    }
}

/// Reads one request (head and a Content-Length body): its path and JSON body.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<Option<(String, Value)>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")).map(|(_, v)| v.trim().to_owned())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Some((path, serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null))))
}

fn head(status: &str, content_type: &str, length: Option<usize>) -> String {
    let length = length.map(|n| format!("content-length: {n}\r\n")).unwrap_or_default();
    format!("HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{length}connection: close\r\n\r\n")
}

async fn json_answer(socket: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    socket.write_all(head("200 OK", "application/json", Some(body.len())).as_bytes()).await?;
    socket.write_all(body).await
}

fn result(id: &Value, result: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "result": result })).unwrap()
}

/// Every tool says it only reads, so the gateway's fail-closed classification lets
/// `call_tool` run it.
fn read_only() -> Value {
    json!({ "readOnlyHint": true })
}

fn tool(name: &str, description: &str) -> Value {
    json!({ "name": name, "description": description, "inputSchema": { "type": "object" }, "annotations": read_only() })
}

async fn serve(mut socket: TcpStream, trap_url: &str) -> std::io::Result<()> {
    let Some((path, message)) = read_request(&mut socket).await? else { return Ok(()) };
    let scenario = path.trim_start_matches('/');
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    match message.get("method").and_then(Value::as_str).unwrap_or("") {
        "initialize" => {
            let init = json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "hostile", "version": "1" },
            });
            json_answer(&mut socket, &result(&id, init)).await
        }
        "tools/list" => list(&mut socket, scenario, &id).await,
        "tools/call" => call(&mut socket, scenario, &id, trap_url).await,
        // Notifications (and anything else) are accepted without an answer.
        _ => socket.write_all(head("202 Accepted", "application/json", Some(0)).as_bytes()).await,
    }
}

async fn list(socket: &mut TcpStream, scenario: &str, id: &Value) -> std::io::Result<()> {
    let tools: Vec<Value> = match scenario {
        "many_tools" => (0..100_000).map(|i| tool(&format!("t{i}"), "")).collect(),
        // Twelve tools of 1 MB each: 12 MB, under the response cap.
        "big_descriptions" => (0..12).map(|i| tool(&format!("t{i}"), &"d".repeat(1 << 20))).collect(),
        "bad_schema" => vec![json!({
            "name": "t",
            "inputSchema": { "type": "object", "properties": { "x": { "type": 17, "minimum": "none" } } },
            "annotations": read_only(),
        })],
        "ok" => vec![json!({
            "name": "echo",
            "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } } },
            "annotations": read_only(),
        })],
        _ => vec![tool("t", "a tool")],
    };
    json_answer(socket, &result(id, json!({ "tools": tools }))).await
}

async fn call(socket: &mut TcpStream, scenario: &str, id: &Value, trap_url: &str) -> std::io::Result<()> {
    let fine = result(id, json!({ "content": [{ "type": "text", "text": "fine" }] }));
    match scenario {
        "ok" | "many_tools" | "big_descriptions" | "bad_schema" => json_answer(socket, &fine).await,
        // Half of a JSON answer, then a TCP reset.
        "reset" => {
            socket.write_all(head("200 OK", "application/json", Some(fine.len())).as_bytes()).await?;
            socket.write_all(&fine[..fine.len() / 2]).await?;
            socket.flush().await?;
            socket.set_zero_linger()?;
            Ok(())
        }
        // Notifications forever, never the response.
        "endless_sse" => {
            socket.write_all(head("200 OK", "text/event-stream", None).as_bytes()).await?;
            let note = json!({ "jsonrpc": "2.0", "method": "notifications/message", "params": { "level": "info", "data": "x".repeat(1000) } });
            let event = format!("event: message\ndata: {note}\n\n");
            loop {
                socket.write_all(event.as_bytes()).await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        // One event whose data never ends.
        "endless_event" => {
            socket.write_all(head("200 OK", "text/event-stream", None).as_bytes()).await?;
            socket.write_all(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"").await?;
            let block = vec![b'y'; 64 << 10];
            loop {
                socket.write_all(&block).await?;
            }
        }
        // A 100 MB JSON body, announced and sent.
        "huge" => {
            let total = 100usize << 20;
            socket.write_all(head("200 OK", "application/json", Some(total)).as_bytes()).await?;
            let block = vec![b' '; 1 << 20];
            for _ in 0..100 {
                socket.write_all(&block).await?;
            }
            Ok(())
        }
        "bad_json" => json_answer(socket, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[").await,
        "bad_utf8" => {
            let mut body = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
            body.extend_from_slice(id.to_string().as_bytes());
            body.extend_from_slice(b",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"\xff\xfe\xc0\"}]}}");
            json_answer(socket, &body).await
        }
        "wrong_id" => {
            let wrong = result(&json!(987_654_321), json!({ "content": [{ "type": "text", "text": "not yours" }] }));
            json_answer(socket, &wrong).await
        }
        // The right answer, one byte a second.
        "slow" => {
            let mut all = head("200 OK", "application/json", Some(fine.len())).into_bytes();
            all.extend_from_slice(&fine);
            for byte in all {
                socket.write_all(&[byte]).await?;
                socket.flush().await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(())
        }
        "redirect" => {
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {trap_url}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            socket.write_all(answer.as_bytes()).await
        }
        _ => json_answer(socket, &fine).await,
    }
}
