//! Redaction (issue 23 §4) against a real downstream (`server-everything`, whose `echo` tool
//! returns what it is given): a fake cloud key and a `gth_` token come back masked, a large
//! result is stashed masked, a blocking detector refuses with a typed error, activity counts
//! the matches and holds nothing of them, and bad detectors are refused at configuration.
//! The suite's secret scan (tests/common/leaks.rs) reads the serve log and every row at the end.

mod common;

use std::time::Duration;

use common::{Everything, Served, TestDb, cli, eventually, gatehouse, mcp_tool, provision};
use serde_json::{Value, json};
use sqlx::Executor;

const AWS: &str = "AKIAZQ3DRSTUVWXY2345";

fn token() -> String {
    // Shaped like an issued access token (the secret scan recognises the shape).
    format!("gth_{}", "Qk9HVVMtbm90LWEtcmVhbC10b2tlbi1qdXN0LXNoYXBl".chars().take(43).collect::<String>())
}

async fn configure(t: &TestDb, patch: Value) -> (i32, String) {
    let file = common::json_path(&patch);
    let mut c = gatehouse(Some(&t.url));
    c.args(["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", &file]);
    let (code, _, err) = common::run(c).await;
    (code, err)
}

async fn platform_text(t: &TestDb, sql: &str) -> Vec<(Option<i32>, String)> {
    let mut conn = t.owner_conn().await;
    conn.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(&mut conn).await.unwrap()
}

#[tokio::test]
async fn secrets_in_results_are_masked_before_the_agent_the_stash_and_activity() {
    common::leaks::record(AWS);
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "everything", &everything.url).await;
    let m = provision(&t.url, "acme").await;

    // Bad detectors are refused, naming the detector; nothing is written.
    for bad in [json!({ "name": "nope" }), json!({ "name": "c", "regex": "(" }), json!({ "name": "c", "regex": "a*" })] {
        let (code, err) = configure(&t, json!({ "redaction": { "detectors": [bad] } })).await;
        assert!(code == 1 && err.contains("invalid_config") && err.contains("redaction.detectors.0"), "{bad}: {err}");
    }
    let detectors = json!([
        { "name": "aws_access_key" },
        { "name": "gatehouse_token", "action": "mask" },
        { "name": "ticket", "regex": "TICKET-[0-9]{6}", "action": "block" },
        { "name": "echoed-canary", "regex": "Echo: canary", "action": "block" },
    ]);
    let (code, err) = configure(&t, json!({ "redaction": { "detectors": detectors } })).await;
    assert_eq!(code, 0, "{err}");

    let served = Served::start(gatehouse(Some(&t.url))).await;
    let gw = format!("{}/t/acme/w/main/mcp", served.base);
    let echo = |message: String| json!({ "address": "everything.echo", "args": { "message": message } });
    let token = token();

    let (err, body, raw) = mcp_tool(&gw, &m, "call_tool", echo(format!("key {AWS} and {token}."))).await;
    assert!(!err, "{body}");
    assert_eq!(body, json!("Echo: key [redacted:aws_access_key] and [redacted:gatehouse_token]."));
    assert!(!raw.contains(AWS) && !raw.contains(&token), "{raw}");

    // A result over the inline cap is stashed already masked, and paged masked.
    let large = format!("{} {AWS} {token} {}", "x".repeat(20_000), "y".repeat(10_000));
    let (err, body, _) = mcp_tool(&gw, &m, "call_tool", echo(large)).await;
    assert!(!err && body["stashed"]["id"].is_string(), "{body}");
    let id = body["stashed"]["id"].clone();
    let mut text = String::new();
    let mut offset = json!(0);
    while !offset.is_null() {
        let page = json!({ "address": "gatehouse.result", "args": { "id": id, "offset": offset } });
        let (err, body, _) = mcp_tool(&gw, &m, "call_tool", page).await;
        assert!(!err, "{body}");
        text.push_str(body["chunk"].as_str().unwrap());
        offset = body["next_offset"].clone();
    }
    assert!(text.contains("[redacted:aws_access_key] [redacted:gatehouse_token]") && !text.contains(AWS), "masked in the stash");
    let stash = platform_text(&t, "SELECT NULL::int, body FROM result_stash").await;
    assert_eq!(stash.len(), 1);
    assert!(!stash[0].1.contains(AWS) && !stash[0].1.contains(&token));

    // A blocking detector: in the arguments, nothing reaches the downstream; in the result only
    // (the arguments say `canary`, the result `Echo: canary`), the result is withheld.
    let (err, body, raw) = mcp_tool(&gw, &m, "call_tool", echo("TICKET-123456".into())).await;
    assert!(err && body["error"]["code"] == "redaction_blocked" && body["error"]["detector"] == "ticket", "{body}");
    assert!(!raw.contains("TICKET-123456"), "{raw}");
    let (err, body, _) = mcp_tool(&gw, &m, "call_tool", echo("canary".into())).await;
    assert!(err && body["error"]["code"] == "redaction_blocked" && body["error"]["detector"] == "echoed-canary", "{body}");

    // Activity counts the matches (two in the arguments, two in the result) and holds nothing
    // of them; the secret scan reads every row and the serve log when the test ends.
    let rows = || platform_text(&t, "SELECT redactions, coalesce(error_code, '') FROM activity ORDER BY occurred_at, id");
    assert!(eventually(Duration::from_secs(10), || async { rows().await.len() >= 6 }).await);
    let counted: Vec<(Option<i32>, String)> = rows().await.into_iter().filter(|(_, code)| !code.is_empty()).collect();
    assert_eq!(counted, [(Some(0), "redaction_blocked".to_owned()), (Some(0), "redaction_blocked".to_owned())]);
    let ok: Vec<Option<i32>> = rows().await.into_iter().filter(|(_, code)| code.is_empty()).map(|(n, _)| n).collect();
    assert_eq!(ok[..2], [Some(4), Some(4)], "{ok:?}");
    let logs = served.logs();
    assert!(!logs.contains(AWS) && !logs.contains(&token));
    assert_eq!(served.terminate().await, 0);
}
