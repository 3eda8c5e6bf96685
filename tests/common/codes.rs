//! The suite-wide check of the OpenAPI document's problem codes (issue 25 item 1): every
//! problem a `serve` answered on a JSON API route, read from its access log (each response's
//! line names the route template, method, status and `code`), must be listed by that
//! operation's response for that status in `/api/v1/openapi.json`. Run with every `serve`
//! the suite starts, when the test is done with it, like the secret scan.
//!
//! With `GATEHOUSE_RECORD_CODES=FILE` the misses are appended to FILE instead of failing, one
//! `METHOD ROUTE STATUS CODE` per line: how the document's table was filled from a whole run.

use std::{
    collections::BTreeSet,
    io::Write,
    sync::{LazyLock, Mutex},
};

use serde_json::Value;

/// The document as this build serves it.
static DOCUMENT: LazyLock<Value> =
    LazyLock::new(|| serde_json::to_value(gatehouse::openapi::build()).expect("the document serialises"));

/// One problem answered: method, route template, status and code.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Answered {
    pub method: String,
    pub route: String,
    pub status: u16,
    pub code: String,
}

/// The problems a `serve` log shows it answered on routes the document describes.
pub fn answered(log: &str) -> BTreeSet<Answered> {
    let mut out = BTreeSet::new();
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else { continue };
        let fields = &entry["fields"];
        let (Some(code), Some(status)) = (fields["code"].as_str(), fields["status"].as_u64()) else { continue };
        let span = &entry["span"];
        let (Some(route), Some(method)) = (span["http.route"].as_str(), span["http.method"].as_str()) else { continue };
        if route.starts_with("/api/") {
            out.insert(Answered {
                method: method.to_lowercase(),
                route: route.to_owned(),
                status: status as u16,
                code: code.to_owned(),
            });
        }
    }
    out
}

/// Whether the document lists `a.code` for `a`'s operation and status. An operation the
/// document lacks (a method the route refuses with 405) has nothing to list.
pub fn documented(a: &Answered) -> bool {
    let Some(op) = DOCUMENT["paths"][&a.route][&a.method].as_object() else { return true };
    op["responses"][a.status.to_string()]["description"].as_str().is_some_and(|d| d.contains(&format!("`{}`", a.code)))
}

static RECORDED: Mutex<()> = Mutex::new(());

/// Fails the test when the log shows a problem its route's document does not list (quiet
/// while the test is already failing).
pub fn check(what: &str, log: &str) {
    if std::thread::panicking() {
        return;
    }
    let missing: Vec<Answered> = answered(log).into_iter().filter(|a| !documented(a)).collect();
    if missing.is_empty() {
        return;
    }
    if let Ok(file) = std::env::var("GATEHOUSE_RECORD_CODES") {
        let _held = RECORDED.lock().unwrap();
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(file).expect("open the record of codes");
        for a in &missing {
            writeln!(f, "{} {} {} {}", a.method, a.route, a.status, a.code).unwrap();
        }
        return;
    }
    let shown: Vec<String> = missing.iter().map(|a| format!("{} {} {} `{}`", a.method, a.route, a.status, a.code)).collect();
    panic!(
        "{what}: answered problem codes that /api/v1/openapi.json does not list for the route \
         (add them to `openapi::CODES`):\n{}",
        shown.join("\n")
    );
}
