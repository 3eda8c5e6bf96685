//! The suite-wide secret scan (issue 25 item 5): a secret may appear only where it is handed
//! out once (a create command's or response's output). Every `serve` log, every row of every
//! test database and every CLI command's output is scanned when the test is done with it, and a
//! secret found there fails the test that produced it.
//!
//! What counts as a secret:
//! - everything Gatehouse issues, recognised by its shape: a known prefix followed by 43
//!   base64url characters (256 random bits) and not part of a longer such run;
//! - values a test hands to Gatehouse as secrets (a downstream's API key, an OpenID client
//!   secret), which the test [`record`]s.

use std::sync::Mutex;

/// Prefixes of the secrets Gatehouse issues (tokens, service credential secrets, connect links,
/// MCP OAuth access and refresh tokens, authorization codes, SCIM tokens).
const ISSUED: [&str; 7] = ["gth_", "gss_", "gcl_", "gha_", "ghr_", "ghz_", "gsm_"];
const ISSUED_LEN: usize = 43;

static RECORDED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Marks `secret` (a value the test gives Gatehouse to keep secret) as one that must never
/// appear in a log, a row or a later output.
pub fn record(secret: &str) {
    assert!(secret.len() >= 8, "too short to scan for without false hits: {secret:?}");
    let mut recorded = RECORDED.lock().unwrap();
    if !recorded.iter().any(|s| s == secret) {
        recorded.push(secret.to_owned());
    }
}

fn base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The secrets found in `text`, each once.
pub fn find(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let bytes = text.as_bytes();
    for prefix in ISSUED {
        for (at, _) in text.match_indices(prefix) {
            let start = at + prefix.len();
            let run = bytes[start..].iter().take_while(|b| base64url(**b)).count();
            let bounded = at == 0 || !base64url(bytes[at - 1]);
            if bounded && run == ISSUED_LEN {
                found.push(text[at..start + run].to_owned());
            }
        }
    }
    for secret in RECORDED.lock().unwrap().iter() {
        if text.contains(secret.as_str()) {
            found.push(secret.clone());
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Fails the test when `text` (named by `what`) holds a secret; quiet while the test is
/// already failing, so the first failure stays the one reported.
pub fn check(what: &str, text: &str) {
    if std::thread::panicking() {
        return;
    }
    let found = find(text);
    if !found.is_empty() {
        let shown: Vec<String> = found.iter().map(|s| format!("{}… ({} chars)", &s[..s.len().min(8)], s.len())).collect();
        panic!("secret scan: {what} holds {} secret(s): {}", found.len(), shown.join(", "));
    }
}

/// Every row of every table of the database at `url` (a superuser's URL, so row-level
/// security hides nothing), one line per row as `table: row`.
pub async fn database_text(url: &str) -> String {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect for the secret scan");
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT schemaname::text, tablename::text FROM pg_tables \
         WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2",
    )
    .fetch_all(&mut conn)
    .await
    .expect("list tables for the secret scan");
    let mut text = String::new();
    for (schema, table) in tables {
        // A row's text shows bytea as hex; `encode(…, 'escape')` keeps printable ASCII (every
        // issued secret) as it is, so those columns are read that way as well.
        let bytea: Vec<String> = sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2 AND data_type = 'bytea' ORDER BY ordinal_position",
        )
        .bind(&schema)
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .expect("list bytea columns for the secret scan");
        let escaped: String = bytea.iter().map(|c| format!(" || ' ' || coalesce(encode(t.\"{c}\", 'escape'), '')")).collect();
        let sql = format!("SELECT t::text{escaped} FROM \"{schema}\".\"{table}\" t");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&mut conn).await.expect("read a table for the secret scan");
        for row in rows {
            let line: String = row.get(0);
            text.push_str(&format!("{schema}.{table}: {line}\n"));
        }
    }
    conn.close().await.ok();
    text
}
