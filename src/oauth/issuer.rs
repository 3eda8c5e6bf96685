//! RFC 9207 (SEP-2468 for MCP clients): the issuer an authorization response names must be
//! the one its request went to, byte for byte, and present where the server promised it.

use crate::{AppState, error::Error, ids::TenantId};

/// The RFC 9207 check of an authorization response's `iss` (SEP-2468 for MCP clients): it
/// defends against mix-up, where one authorization server's response is delivered as
/// another's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IssCheck {
    /// The issuer the request went to, exactly as its metadata names it (None: the endpoints
    /// were configured, so there is no issuer to compare with).
    pub issuer: Option<String>,
    /// Its metadata promised `iss` on every authorization response.
    pub required: bool,
}

impl IssCheck {
    /// Accepts `iss` only when it is byte for byte the recorded issuer: no trailing-slash,
    /// case or percent-encoding normalisation (RFC 9207 §2.4 asks for simple string
    /// comparison). A missing `iss` is refused where the server promised one.
    pub fn check(&self, iss: Option<&str>) -> std::result::Result<(), &'static str> {
        match (iss, &self.issuer) {
            (Some(got), Some(expected)) if got == expected => Ok(()),
            (Some(_), Some(_)) => Err("the authorization response names another issuer"),
            (None, _) if self.required => Err("the authorization response carries no issuer, though its server promised one"),
            // Configured endpoints name no issuer to compare with; nothing promised one.
            (Some(_), None) | (None, _) => Ok(()),
        }
    }
}

/// An authorization response whose `iss` failed the RFC 9207 check (carried out of the
/// claim's transaction as its error, so the claim rolls back).
#[derive(Debug)]
pub struct IssRefused {
    pub connector: String,
    pub why: &'static str,
}

impl From<IssRefused> for Error {
    fn from(r: IssRefused) -> Error {
        Error::Forbidden { code: "issuer_mismatch", message: format!("{} (connector `{}`)", r.why, r.connector) }
    }
}

/// Records an `issuer_mismatch` refusal as an ops failure (a mix-up attempt, or a
/// misconfigured server, is something an operator must see); other errors pass unchanged.
pub fn refused(state: &AppState, tenant: TenantId, e: Error) -> Error {
    if let Error::Forbidden { code: "issuer_mismatch", message } = &e {
        state.ops.record(crate::ops::Failure {
            operation: "oauth.callback",
            stage: "issuer".into(),
            tenant: Some(tenant.0),
            workspace: None,
            status: crate::ops::Status::Failed,
            code: "issuer_mismatch".into(),
            message: message.clone(),
            reference: None,
        });
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iss_must_be_the_recorded_issuer_exactly() {
        let promised = IssCheck { issuer: Some("https://as.example/tenant1".into()), required: true };
        assert_eq!(promised.check(Some("https://as.example/tenant1")), Ok(()));
        for wrong in
            ["https://as.example/tenant1/", "https://AS.example/tenant1", "https://as.example/tenant%31", "https://evil.example"]
        {
            assert!(promised.check(Some(wrong)).is_err(), "{wrong} was accepted");
        }
        assert!(promised.check(None).is_err(), "a missing iss was accepted although promised");
        let unpromised = IssCheck { required: false, ..promised.clone() };
        assert_eq!(unpromised.check(None), Ok(()));
        assert!(unpromised.check(Some("https://as.example/tenant1/")).is_err(), "a present iss is always checked");
        let configured = IssCheck::default();
        assert_eq!(configured.check(None), Ok(()));
        assert_eq!(configured.check(Some("https://anything.example")), Ok(()));
    }
}
