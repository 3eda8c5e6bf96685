//! schemathesis against a running server (issue 25 §2): requests generated from
//! `/api/v1/openapi.json`, sent once as the tenant's owner (session cookie + CSRF) and once
//! as a machine (service credential + token). It must find no 5xx, no answer that does not
//! match the document, and no problem+json body without a stable `code`
//! (tests/peers/schemathesis_hooks.py). The examples are bounded so that a run takes minutes.

mod common;

use std::{path::PathBuf, sync::Arc};

use common::{Served, TestDb, browser::Browser, cli, email_fill, gatehouse, provision};
use reqwest::cookie::CookieStore;

/// Examples per operation and phase: enough to reach every operation with valid and invalid
/// input, few enough for a debug server on two cores. `GATEHOUSE_SCHEMATHESIS_EXAMPLES` and
/// `GATEHOUSE_SCHEMATHESIS_PHASES` make a deeper local run.
const MAX_EXAMPLES: &str = "10";
const PHASES: &str = "examples,coverage,fuzzing,stateful";
const CHECKS: &str =
    "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance,problem_has_code";

fn peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers")
}

/// Runs schemathesis with `headers`; returns its exit code and output.
async fn schemathesis(base: &str, headers: &[(&str, String)], dir: &std::path::Path) -> (i32, String) {
    let exe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/peers/venv/bin/schemathesis");
    assert!(exe.exists(), "schemathesis is installed by scripts/test.sh from tests/peers/requirements.txt");
    // Every operation runs in the one tenant and workspace the test made.
    let config = dir.join("schemathesis.toml");
    std::fs::write(&config, "[parameters]\n\"path.tenant\" = \"acme\"\n\"path.workspace\" = \"main\"\n").unwrap();
    let mut cmd = tokio::process::Command::new(exe);
    cmd.current_dir(dir)
        .env("PYTHONPATH", peers())
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{base}/api/v1/openapi.json"))
        .args(["--url", base])
        .args(["--checks", &std::env::var("GATEHOUSE_SCHEMATHESIS_CHECKS").unwrap_or(CHECKS.into())])
        .args(["--max-examples", &std::env::var("GATEHOUSE_SCHEMATHESIS_EXAMPLES").unwrap_or(MAX_EXAMPLES.into())])
        .args(["--phases", &std::env::var("GATEHOUSE_SCHEMATHESIS_PHASES").unwrap_or(PHASES.into())])
        .args(["--seed", "25"])
        .args(["--workers", "2"])
        .args(["--generation-with-security-parameters", "false"])
        .arg("--no-color");
    for (name, value) in headers {
        cmd.arg("-H").arg(format!("{name}: {value}"));
    }
    let out = cmd.output().await.expect("run schemathesis");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn schemathesis_finds_nothing_as_owner_or_machine() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let machine = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = served.base.clone();

    // The owner signs in through the development provider; the cookie jar gives the session.
    let jar = Arc::new(reqwest::cookie::Jar::default());
    gatehouse::install_crypto();
    let client =
        reqwest::Client::builder().cookie_provider(jar.clone()).redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let owner = Browser { client, base: base.clone() };
    let landing = owner.walk(&format!("{base}/login?next=/"), email_fill("alice@example.test")).await;
    assert_eq!(landing.status, 200, "{landing:?}");
    let cookie = jar.cookies(&base.parse().unwrap()).expect("a session cookie").to_str().unwrap().to_owned();
    let csrf = owner.csrf().await;

    let dir = std::env::temp_dir().join(format!("gatehouse-schemathesis-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    // The machine goes first: the owner's run may revoke what it finds (tokens, credentials).
    let runs = [
        (
            "machine",
            vec![
                ("Gatehouse-Client-Id", machine.client_id.clone()),
                ("Gatehouse-Client-Secret", machine.client_secret.clone()),
                ("Authorization", format!("Bearer {}", machine.token)),
            ],
        ),
        ("owner", vec![("Cookie", cookie), ("X-CSRF-Token", csrf), ("Origin", base.clone())]),
    ];
    let mut failed = Vec::new();
    for (who, headers) in &runs {
        let (code, output) = schemathesis(&base, headers, &dir).await;
        println!("== schemathesis as {who} (exit {code})\n{output}");
        if code != 0 {
            failed.push(*who);
        }
    }
    assert!(failed.is_empty(), "schemathesis found problems as {failed:?}; see the output above");
    let _ = std::fs::remove_dir_all(&dir);
}
