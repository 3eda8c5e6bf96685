//! A connector's health on its workspace page: its last call (from activity), the classified
//! problem when its last call failed or an open finding names it, with a fixed repair prompt
//! (the gateway's own `authorize_connector` advice; never downstream text), and the credential
//! "test" button.
//!
//! The test is one harmless downstream exchange with the stored credential: a remote MCP
//! server gets `initialize` and `tools/list` over a fresh session that is not kept (the same
//! probe as the API's `…/credentials/{slot}/test`); an HTTP API has no call known to be safe,
//! so its credential is only opened and rendered into its headers (see docs/decisions.md).

use axum::{
    Router,
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    routing::post,
};

use super::{Console, PageError, when};
use crate::{
    AppState,
    error::Error,
    gateway::{activity::http::Filters, credentials},
    members::Permission,
    workspaces::Connector,
};

/// The connector's most recent call through the gateway.
pub struct LastCall {
    pub at: String,
    pub tool: String,
    pub outcome: String,
    pub error_code: String,
}

/// A classified problem and how to repair it.
pub struct ProblemView {
    pub code: String,
    /// Where it was seen: the last call, or an open finding.
    pub seen: String,
    /// What to do, fixed text per code.
    pub repair: String,
    /// (href, label) of the page or control that repairs it, when there is one here.
    pub link: Option<(String, String)>,
}

/// The outcome of the credential test.
pub struct TestView {
    pub ok: bool,
    pub code: String,
    pub message: String,
}

/// The tenant's open and acknowledged findings, read once per workspace page (empty without
/// `activity_access`).
pub async fn open_findings(c: &Console, state: &AppState) -> Result<Vec<crate::findings::Finding>, PageError> {
    if !c.ctx.permissions.has(Permission::ActivityAccess) {
        return Ok(Vec::new());
    }
    let all = crate::findings::list(&state.db, c.ctx.tenant.id, None, 1000).await?;
    Ok(all.into_iter().filter(|f| matches!(f.status.as_str(), "open" | "acked")).collect())
}

/// The last call and the problem, for people with `activity_access` (activity and findings
/// are theirs to read); `(None, None)` for everyone else.
pub async fn health(
    c: &Console,
    state: &AppState,
    ws: &str,
    id: &str,
    connector: &Connector,
    open: &[crate::findings::Finding],
) -> Result<(Option<LastCall>, Option<ProblemView>), PageError> {
    if !c.ctx.permissions.has(Permission::ActivityAccess) {
        return Ok((None, None));
    }
    let filters =
        Filters { limit: Some(1), workspace: Some(ws.to_owned()), connector: Some(id.to_owned()), ..Filters::default() };
    let page = crate::gateway::activity::http::page(&state.db, c.ctx.tenant.id, &filters).await?;
    let last = page["items"].as_array().and_then(|items| items.first()).map(|item| {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
        let at = item["occurred_at"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| when(&t.with_timezone(&chrono::Utc)))
            .unwrap_or_default();
        LastCall { at, tool: text(&item["tool"]), outcome: text(&item["outcome"]), error_code: text(&item["error_code"]) }
    });
    // The gateway names the connector at the start of the failures it records.
    let prefix = format!("connector {id}:");
    let finding = open.iter().find(|f| f.last_message.starts_with(&prefix));
    let problem = match (&last, finding) {
        // Only codes that say something about the connector; a caller's own mistake (bad
        // arguments, an unknown tool) is no problem of the connector's.
        (Some(l), _) if l.outcome == "error" && CONNECTOR_CODES.contains(&l.error_code.as_str()) => {
            Some(classify(c.slug(), ws, id, connector, &l.error_code, format!("last call, {}", l.at)))
        }
        (_, Some(f)) => Some(classify(
            c.slug(),
            ws,
            id,
            connector,
            &f.code,
            format!("{} finding, {} occurrences, last {}", f.status, f.occurrences, when(&f.last_seen)),
        )),
        _ => None,
    };
    Ok((last, problem))
}

/// Error codes that describe the connector (its server, its credential), not the call.
const CONNECTOR_CODES: [&str; 7] =
    ["auth_required", "credential_unreadable", "vault_disabled", "unavailable", "timeout", "rate_limited", "downstream_error"];

/// The fixed repair prompt for an error code, with the control that repairs it.
fn classify(tenant: &str, ws: &str, id: &str, connector: &Connector, code: &str, seen: String) -> ProblemView {
    let here = format!("/console/t/{tenant}/workspaces/{ws}");
    let oauth = connector.auth().oauth().is_some();
    let client_credentials =
        connector.auth().oauth().is_some_and(|o| o.flow == crate::workspaces::config::Flow::ClientCredentials);
    let credential = (format!("{here}#credential-{id}"), "Set the credential".to_owned());
    let (repair, link) = match code {
        "auth_required" if client_credentials => (
            "The authorization server refused the connector's client credentials. Set the client's secret or private key again.",
            Some((format!("{here}#grant-{id}"), "The connector's grant".to_owned())),
        ),
        "auth_required" if oauth => (
            "The connector is not authorized (or its authorization ended). Connect it again at its authorization server.",
            Some((format!("{here}/connectors/{id}/oauth/connect"), "Re-connect OAuth".to_owned())),
        ),
        "auth_required" => ("The connector's credential is missing. Set it.", Some(credential)),
        "credential_unreadable" => (
            "The stored credential cannot be opened (its key is no longer in GATEHOUSE_VAULT_KEYS). Set it again.",
            Some(credential),
        ),
        "vault_disabled" => {
            ("Credentials need the vault: set GATEHOUSE_VAULT_KEYS on every replica, then set the credential.", None)
        }
        "unavailable" => (
            "The connector's server cannot be reached. Check that it runs and that the connector's URL is right, then test the credential.",
            None,
        ),
        "timeout" => (
            "The connector's server did not answer in time. Check its health, or raise timeout_ms in the connector's configuration.",
            None,
        ),
        "rate_limited" => ("This tenant had too many calls in flight at once; calls succeed again shortly.", None),
        "downstream_error" if oauth => (
            "The connector's server refused the call. If it refuses every call, disconnect the connector and connect it again.",
            Some((format!("{here}#grant-{id}"), "Re-connect OAuth".to_owned())),
        ),
        "downstream_error" => (
            "The connector's server refused the call. If it refuses every call, the credential itself is wrong: set it again.",
            connector.auth().slot().map(|_| credential),
        ),
        _ => ("See this connector's calls on the activity page.", None),
    };
    let link = link.or_else(|| {
        Some((format!("/console/t/{tenant}/activity?workspace={ws}&connector={id}"), "Activity of this connector".to_owned()))
    });
    ProblemView { code: code.to_owned(), seen, repair: repair.to_owned(), link }
}

/// The fixed explanation of a test's error code (the downstream's own text is never shown).
fn explain(code: &str) -> &'static str {
    match code {
        "unavailable" => "the connector's server cannot be reached",
        "timeout" => "the connector's server did not answer within the connector's deadline",
        "rate_limited" => "this tenant has too many calls in flight; try again shortly",
        "downstream_error" => "the connector's server refused the request: the credential is probably wrong",
        "auth_required" => "the credential is missing",
        "credential_unreadable" => "the stored credential cannot be opened; set it again",
        "vault_disabled" => "the vault is off (GATEHOUSE_VAULT_KEYS)",
        "no_credentials" => "this connector takes no credential",
        _ => "the test failed",
    }
}

/// Runs the test for the slot this person manages (the same checks as setting it).
async fn run_test(c: &Console, state: &AppState, ws: &str, id: &str) -> Result<TestView, Error> {
    let (_, owner, workspace, connector) = super::workspaces::managed_slot(c, state, ws, id).await?;
    let caller = credentials::Caller {
        tenant: c.ctx.tenant.id,
        tenant_slug: &c.ctx.tenant.slug,
        workspace,
        workspace_slug: ws,
        member_id: owner.member_id(),
        epoch: None,
    };
    let failed = |code: &str| TestView { ok: false, code: code.to_owned(), message: explain(code).to_owned() };
    let credential = match credentials::resolve(state, &caller, id, &connector).await {
        Ok(credential) => credential,
        Err(problem) => return Ok(failed(problem.code)),
    };
    Ok(match &connector {
        Connector::HttpApi(_) => TestView {
            ok: true,
            code: "opens".into(),
            message: "the credential opens and fills the connector's headers; an HTTP API has no request known to be harmless, so none was sent".into(),
        },
        Connector::RemoteMcp { .. } => match state.downstreams.probe(&connector, credential.as_ref()).await {
            Ok(tools) => TestView { ok: true, code: "ok".into(), message: format!("the server answered initialize and listed {tools} tools") },
            Err(f) => failed(f.into_error().code()),
        },
        // A peer takes no credential (the slot check above already refuses it).
        Connector::Peer { .. } => failed("no_credentials"),
    })
}

async fn test_credential(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    match run_test(&c, &state, &ws, &id).await {
        // The test ran either way: its outcome is the page's content.
        Ok(view) => super::workspaces::workspace_page(&c, &state, &ws, StatusCode::OK, None, None, Some((id, view))).await,
        Err(e @ Error::Forbidden { .. }) => Err(e.into()),
        Err(e) => {
            let error = super::FormError::of(e)?;
            super::workspaces::workspace_page(&c, &state, &ws, StatusCode::UNPROCESSABLE_ENTITY, Some(error), None, None).await
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/credential/test", post(test_credential))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connector(auth: serde_json::Value) -> Connector {
        serde_json::from_value(serde_json::json!({ "kind": "remote_mcp", "url": "https://mcp.example/mcp", "auth": auth }))
            .unwrap()
    }

    #[test]
    fn problems_get_the_repair_that_fits_the_connector() {
        let slot =
            connector(serde_json::json!({ "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}" } }));
        let p = classify("acme", "main", "crm", &slot, "auth_required", "last call".into());
        assert_eq!(
            p.link.unwrap(),
            ("/console/t/acme/workspaces/main#credential-crm".to_owned(), "Set the credential".to_owned())
        );
        let p = classify("acme", "main", "crm", &slot, "unavailable", "finding".into());
        assert!(p.repair.contains("cannot be reached"));
        assert!(p.link.unwrap().0.starts_with("/console/t/acme/activity?workspace=main&connector=crm"));
        let oauth = connector(serde_json::json!({ "type": "oauth", "grant": "shared", "client_id": "c", "scopes": ["x"],
            "authorization_endpoint": "https://as.example/auth", "token_endpoint": "https://as.example/token" }));
        let p = classify("acme", "main", "crm", &oauth, "auth_required", "last call".into());
        assert_eq!(
            p.link.unwrap(),
            ("/console/t/acme/workspaces/main/connectors/crm/oauth/connect".to_owned(), "Re-connect OAuth".to_owned())
        );
        let p = classify("acme", "main", "crm", &slot, "something new", "x".into());
        assert_eq!(p.code, "something new");
        for code in ["unavailable", "timeout", "rate_limited", "downstream_error", "auth_required", "credential_unreadable"] {
            assert_ne!(explain(code), explain("?"), "{code} has its own explanation");
        }
    }
}
