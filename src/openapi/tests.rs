//! The document against the router, the conventions and the problem codes of the source.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

#[test]
fn every_json_api_route_is_in_the_document_and_nothing_else() {
    let (router, _) = routes().split_for_parts();
    let routed: BTreeMap<String, BTreeSet<String>> =
        routed(&router).into_iter().filter(|(path, _)| path.starts_with("/api/")).collect();
    assert!(routed.len() > 50, "the route table was read: {routed:?}");
    let doc = serde_json::to_value(build()).unwrap();
    let documented: BTreeMap<String, BTreeSet<String>> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| (path.clone(), item.as_object().unwrap().keys().cloned().collect()))
        .collect();
    assert_eq!(routed, documented, "every /api/ route and method is documented, and only those");
}

#[test]
fn the_route_reader_sees_an_undocumented_route() {
    // The check above fails when someone adds a route without an annotation.
    let (router, _) = routes().route("/api/v1/undocumented", axum::routing::get(|| async {})).split_for_parts();
    let routed = routed(&router);
    assert_eq!(routed.get("/api/v1/undocumented"), Some(&BTreeSet::from(["get".to_owned()])));
    assert!(!build().paths.paths.contains_key("/api/v1/undocumented"));
}

#[test]
fn the_document_is_openapi_3_1_with_problem_answers() {
    let doc = serde_json::to_value(build()).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    for name in [SESSION, CSRF, MACHINE_ID, MACHINE_SECRET, MACHINE_TOKEN, OAUTH] {
        assert!(schemes.contains_key(name), "{name}");
    }
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            assert!(responses.contains_key("500"), "{method} {path}");
            if path.starts_with("/api/v1/tenants/") {
                for status in ["401", "403", "404"] {
                    assert!(responses.contains_key(status), "{method} {path} {status}");
                }
            }
        }
    }
}

#[test]
fn every_row_of_the_code_table_names_an_operation_and_lists_its_codes() {
    let doc = serde_json::to_value(build()).unwrap();
    for (method, path, status, codes) in CODES {
        let description = doc["paths"][path][method]["responses"][status.to_string()]["description"].as_str();
        let description = description.unwrap_or_else(|| panic!("{method} {path} {status} is an operation's answer"));
        for code in *codes {
            assert!(description.contains(&format!("`{code}`")), "{method} {path} {status}: {description}");
        }
    }
}

/// Codes the source gives problems (the shapes `code: "…"`, `invalid("…"` and
/// `problem(StatusCode::…, "…"`) that the JSON API cannot answer: they belong to the MCP
/// endpoint, the OAuth and sign-in endpoints, the console's pages, the CLI or startup, or
/// never reach a client (recorded as an ops failure or a finding, or replaced on the way).
const OUTSIDE_THE_API: &[&str] = &[
    // A tool result's code on the MCP endpoint (a held-back call's approval was denied).
    "approval_denied",
    "authorization_denied",
    "client_revoked",
    "credential_refused",
    "cross_site_request",
    "destination_written",
    "export_already_imported",
    "export_digest_mismatch",
    "export_format_unsupported",
    "export_integrity",
    "export_invalid",
    "export_key_invalid",
    "export_missing",
    "export_schema_mismatch",
    "export_target_unwritable",
    "export_truncated",
    "export_unreadable",
    "flow_claimed",
    "idempotency_key_replayed",
    "illegal_transition",
    "invalid_base_url",
    "invalid_callback",
    "invalid_client",
    "invalid_client_metadata",
    "invalid_database_url",
    "invalid_filter",
    "invalid_format",
    "invalid_grant",
    "invalid_id_token",
    "invalid_link",
    "invalid_override",
    "invalid_permission",
    // The console dashboard's time range (no JSON API serves the dashboard).
    "invalid_range",
    "invalid_redirect_uri",
    "invalid_request",
    "invalid_state",
    "invalid_target",
    "invalid_time",
    "issuer_mismatch",
    "link_expired",
    "machine_credentials_required",
    "membership_fenced",
    "missing_code",
    "missing_state",
    "missing_value",
    "moves_unsettled",
    "not_a_member",
    "not_delivered",
    "not_imported",
    "not_ready",
    "not_sealed",
    "oauth_misconfigured",
    "oauth_registration_failed",
    "oauth_registration_unsupported",
    "provider_error",
    "provider_unavailable",
    "quota_unavailable",
    "registration_limit",
    "slug_mismatch",
    "sso_connection_gone",
    "sso_email_not_allowed",
    "sso_not_provisioned",
    "status_changed",
    "tenant_exists",
    "tenant_not_exportable",
    "token_exchange_failed",
    "tools_changed",
    "unawaited_calls",
    "uniqueness",
    "unsupported_grant_type",
    "value_on_command_line",
    "verify_failed",
    "workspace_suspended",
    "write_budget_exceeded",
    "wrong_member",
];

#[test]
fn every_problem_code_in_the_source_is_documented_or_outside_the_api() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let shape = regex::Regex::new(
        r#"(?:code:\s*|[^_a-z]invalid\(\s*|FormError::new\(\s*|problem\(\s*StatusCode::[A-Z_]+,\s*)"([a-z0-9_]+)""#,
    )
    .unwrap();
    let mut codes = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        codes.extend(shape.captures_iter(&text).map(|c| c[1].to_owned()));
    }
    assert!(codes.len() > 100, "the source was read: {codes:?}");
    let doc = serde_json::to_string(&build()).unwrap();
    let missing: Vec<&String> =
        codes.iter().filter(|c| !OUTSIDE_THE_API.contains(&c.as_str()) && !doc.contains(&format!("`{c}`"))).collect();
    assert!(missing.is_empty(), "problem codes in no operation of the document (add them to CODES): {missing:?}");
    let stale: Vec<&&str> = OUTSIDE_THE_API.iter().filter(|c| !codes.contains(**c) || doc.contains(&format!("`{c}`"))).collect();
    assert!(stale.is_empty(), "listed as outside the API, yet documented or gone from the source: {stale:?}");
}
