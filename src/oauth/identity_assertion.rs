//! Enterprise-managed authorization (the MCP extension of SEP-990) for a connector configured
//! with `"flow": "identity_assertion"`: a member's own grant, got with no authorization page.
//!
//! 1. The member presents an identity token from the connector's enterprise identity provider.
//!    Gatehouse reads its claims (issuer, expiry, and whose it is) before sending it anywhere.
//! 2. Token exchange (RFC 8693) at the identity provider: the identity token for an Identity
//!    Assertion JWT Authorization Grant (ID-JAG) whose audience is the connector's authorization
//!    server and whose resource is the downstream.
//! 3. The JWT bearer grant (RFC 7523) at the authorization server: the ID-JAG as `assertion`,
//!    authenticated as the connector's static confidential client (its sealed secret or private
//!    key), with a DPoP proof where the server offers DPoP.
//!
//! The tokens are stored as the member's grant with its admin-log row, like an authorization
//! code grant's. A refusal at either step stores nothing and records an ops failure.

use super::*;
use crate::members::Member;

/// The token type of an identity token (RFC 8693 §3).
const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
/// The token type of an Identity Assertion JWT Authorization Grant.
const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The longest identity token read (a JWT of a few claims is well under 4 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The largest answer read from either token endpoint.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What Gatehouse reads of an identity token before it sends it anywhere. Its signature is the
/// identity provider's to check: the exchange fails for a token the provider did not issue, so
/// the claims are trusted only once the exchange succeeded.
#[derive(Debug, PartialEq)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub email: Option<String>,
    pub email_verified: Option<bool>,
    pub exp: i64,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid("invalid_identity_token", Some("identity_token"), message)
}

/// The claims of a compact JWS (`header.payload.signature`, base64url without padding): `iss`,
/// `sub` and a numeric `exp` are required, `email` and `email_verified` read when present.
pub fn claims(token: &str) -> Result<Claims> {
    use base64::Engine;
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(invalid(format!("an identity token is a JWT of 1 to {MAX_TOKEN_BYTES} bytes")));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let b64 = |p: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).ok();
    let [header, payload, signature] = parts[..] else {
        return Err(invalid("an identity token is a signed JWT: three base64url parts joined by dots"));
    };
    let json = |p: &str| b64(p).and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    let (Some(header), Some(payload)) = (json(header), json(payload)) else {
        return Err(invalid("an identity token's header and payload are base64url JSON objects"));
    };
    if !header.is_object() || b64(signature).is_none_or(|s| s.is_empty()) {
        return Err(invalid("an identity token is a signed JWT: its header is an object and its signature is not empty"));
    }
    let text = |name: &str| payload[name].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let (Some(iss), Some(sub), Some(exp)) = (text("iss"), text("sub"), payload["exp"].as_f64()) else {
        return Err(invalid("an identity token names its issuer (`iss`), subject (`sub`) and expiry (`exp`)"));
    };
    Ok(Claims { iss, sub, email: text("email"), email_verified: payload["email_verified"].as_bool(), exp: exp as i64 })
}

impl Claims {
    /// Checks the token before it is sent anywhere: issued by `issuer` (exactly as configured),
    /// not expired at `now` (Unix seconds), and `member`'s own: the member's principal (they
    /// signed in to Gatehouse through this provider), else their email, unless the token says
    /// that email is unverified.
    pub fn check(&self, issuer: &str, now: i64, member: &Member) -> Result<()> {
        if self.iss != issuer {
            return Err(invalid(format!(
                "the identity token was issued by `{}`, not by the connector's identity provider `{issuer}`",
                self.iss
            )));
        }
        if self.exp <= now {
            return Err(invalid("the identity token has expired; sign in to the identity provider again"));
        }
        let principal = member.issuer == self.iss && member.subject == self.sub;
        let email = matches!((&self.email, &member.email), (Some(a), Some(b)) if a.eq_ignore_ascii_case(b))
            && self.email_verified != Some(false);
        if principal || email {
            Ok(())
        } else {
            Err(Error::Forbidden {
                code: "identity_token_not_yours",
                message: "the identity token names another person than the signed-in member".into(),
            })
        }
    }
}

fn unreachable(who: &str) -> Error {
    Error::Unavailable {
        code: "identity_provider_unavailable",
        message: format!("the {who} could not be reached or gave no usable answer; retry shortly"),
        retry_after_ms: Some(5000),
    }
}

/// An error answer's `error` code, kept to a safe short token (it lands in an ops row).
fn error_code(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let code: String = value["error"].as_str().unwrap_or("provider_error").chars().take(64).collect();
    if code.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') { code } else { "provider_error".into() }
}

/// One refused step, recorded as an ops failure; answered as a 403 with `code`.
fn refused(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    step: &'static str,
    code: &'static str,
    why: String,
) -> Error {
    tracing::warn!(connector = %id, step, why = %why, "an identity assertion was refused");
    crate::ops::record(
        &state.ops,
        crate::ops::Failure {
            operation: "oauth.identity_assertion",
            stage: step.into(),
            tenant: Some(tenant.0),
            workspace: Some(workspace),
            status: crate::ops::Status::Failed,
            message: format!("connector {id} (personal grant): {step} refused: {why}"),
            code: why.clone(),
            reference: None,
        },
    );
    let whom = if step == "token_exchange" { "the identity provider" } else { "the connector's authorization server" };
    Error::Forbidden { code, message: format!("{whom} refused the identity assertion (`{why}`)") }
}

/// A POST of a form, its answer read whole (at most [`MAX_ANSWER_BYTES`]).
async fn post_form(
    http: &dpop::Http<'_>,
    url: &str,
    form: &[(&str, &str)],
    basic: Option<&str>,
) -> std::result::Result<(u16, Vec<u8>), ()> {
    use openidconnect::AsyncHttpClient;
    let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let mut request = openidconnect::HttpRequest::new(body.into_bytes());
    *request.method_mut() = axum::http::Method::POST;
    *request.uri_mut() = url.parse().map_err(|_| ())?;
    let headers = request.headers_mut();
    headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
    headers.insert(axum::http::header::ACCEPT, HeaderValue::from_static("application/json"));
    if let Some(basic) = basic {
        headers.insert(axum::http::header::AUTHORIZATION, HeaderValue::from_str(basic).map_err(|_| ())?);
    }
    let response = http.call(request).await.map_err(|_| ())?;
    let status = response.status().as_u16();
    let body = response.into_body();
    if body.len() > MAX_ANSWER_BYTES {
        return Err(());
    }
    Ok((status, body))
}

/// `Authorization: Basic` of RFC 6749 §2.3.1: each part form-encoded, then base64 of `id:secret`.
fn basic(id: &str, secret: &str) -> String {
    use base64::Engine;
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", enc(id), enc(secret))))
}

/// Connects `member`'s grant of connector `id` with their identity token (see the module).
#[allow(clippy::too_many_arguments)]
#[tracing::instrument(name = "oauth::identity_assertion", skip_all, fields(tenant = %tenant, connector = id))]
pub async fn connect(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    connector: &Connector,
    o: &OauthAuth,
    member: &Member,
    identity_token: &str,
    audit: &Audit,
) -> Result<()> {
    let ring = ring(state)?;
    let idp = o.identity_provider.as_ref().ok_or_else(|| Error::Conflict {
        code: "not_identity_assertion",
        message: format!("connector `{id}` does not take identity assertions"),
    })?;
    let claims = claims(identity_token)?;
    claims.check(&idp.issuer, chrono::Utc::now().timestamp(), member)?;
    let client_id = o.client_id.as_deref().unwrap_or_default();
    let (kind, _) = client_auth::secret(state, tenant, workspace, id).await?;
    let endpoints = discovery::endpoints(&state.oauth.http.0, connector, o).await?;
    let method = client_auth::confidential_method(endpoints.token_auth_methods.as_deref(), kind)?;
    let creds = Creds::load(state, tenant, workspace, id, client_id, method).await?;
    // The ID-JAG's audience is the authorization server's issuer (SEP-990).
    let audience = endpoints.issuer.clone().ok_or_else(|| discovery::unavailable("the authorization server names no issuer"))?;
    let idp_token = match &idp.token_endpoint {
        Some(url) => url.clone(),
        None => discovery::token_endpoint_of(&state.oauth.http.0, &idp.issuer).await?,
    };
    let scopes = if o.scopes.is_empty() { endpoints.scopes.clone().unwrap_or_default() } else { o.scopes.clone() };
    let scope = scopes.join(" ");

    // Step 2: the identity token for an ID-JAG, at the identity provider (a public client there).
    let plain = dpop::Http { inner: &state.oauth.http, signer: None };
    let mut form = vec![
        ("grant_type", TOKEN_EXCHANGE),
        ("subject_token", identity_token),
        ("subject_token_type", ID_TOKEN_TYPE),
        ("requested_token_type", ID_JAG_TYPE),
        ("audience", audience.as_str()),
        ("client_id", idp.client_id.as_str()),
    ];
    if let Some(resource) = &endpoints.resource {
        form.push(("resource", resource));
    }
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    let (status, body) = post_form(&plain, &idp_token, &form, None).await.map_err(|_| unreachable("identity provider"))?;
    let body = Zeroizing::new(body);
    if status != 200 {
        return Err(refused(state, tenant, workspace, id, "token_exchange", "identity_exchange_refused", error_code(&body)));
    }
    let answer: serde_json::Value = serde_json::from_slice(&body).map_err(|_| unreachable("identity provider"))?;
    let (Some(id_jag), Some(ID_JAG_TYPE)) = (answer["access_token"].as_str(), answer["issued_token_type"].as_str()) else {
        return Err(refused(state, tenant, workspace, id, "token_exchange", "identity_exchange_refused", "not_an_id_jag".into()));
    };
    let id_jag = Zeroizing::new(id_jag.to_owned());

    // Step 3: the ID-JAG as a JWT bearer grant, as the connector's confidential client.
    let signer = dpop::signer(None, endpoints.dpop)?;
    let bound = dpop::Http { inner: &state.oauth.http, signer: signer.as_ref() };
    let assertion_params = creds.assertion_params(&audience)?;
    let secret = creds.secret.as_ref().map(|s| s.as_str()).unwrap_or_default();
    let mut form = vec![("grant_type", JWT_BEARER), ("assertion", id_jag.as_str())];
    if let Some(resource) = &endpoints.resource {
        form.push(("resource", resource));
    }
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    let header = match method {
        Method::ClientSecretBasic => Some(Zeroizing::new(basic(client_id, secret))),
        Method::ClientSecretPost => {
            form.extend([("client_id", client_id), ("client_secret", secret)]);
            None
        }
        Method::PrivateKeyJwt | Method::None => {
            form.push(("client_id", client_id));
            form.extend(assertion_params.iter().map(|(k, v)| (*k, v.as_str())));
            None
        }
    };
    let sent = post_form(&bound, &endpoints.token, &form, header.as_deref().map(String::as_str)).await;
    let (status, body) = sent.map_err(|_| unreachable("connector's authorization server"))?;
    let body = Zeroizing::new(body);
    if status != 200 {
        return Err(refused(state, tenant, workspace, id, "jwt_bearer", "jwt_bearer_refused", error_code(&body)));
    }
    let response: oauth2::basic::BasicTokenResponse =
        serde_json::from_slice(&body).map_err(|_| unreachable("connector's authorization server"))?;
    let tokens = Tokens {
        access_token: response.access_token().secret().clone(),
        refresh_token: response.refresh_token().map(|r| r.secret().clone()),
        dpop_key: bound_key(&response, signer.as_ref()),
    };
    let label: String = claims.email.as_deref().unwrap_or(&claims.sub).chars().take(200).collect();
    let grant = GrantParts {
        expires_in: response.expires_in().map(|d| d.as_secs() as i64),
        client: store::FlowClient {
            client_id,
            token_endpoint: &endpoints.token,
            client_auth: method.as_str(),
            resource: endpoints.resource.as_deref(),
            scopes: (!scopes.is_empty()).then_some(scopes.as_slice()),
        },
        label: Some(&label),
    };
    let slot = Slot { tenant, workspace, connector: id, owner: Owner::Member(member.id) };
    store_grant(state, ring, &slot, &tokens, grant, audit).await
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use proptest::prelude::*;

    use super::*;

    fn jwt(payload: serde_json::Value) -> String {
        let e = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.c2ln", e(&json!({ "alg": "ES256" })), e(&payload))
    }

    fn member(email: Option<&str>) -> Member {
        Member {
            id: Uuid::nil(),
            issuer: "https://signin.example".into(),
            subject: "s-1".into(),
            email: email.map(str::to_owned),
            display_name: None,
            role: crate::members::Role::Member,
            created_at: chrono::Utc::now(),
        }
    }

    const IDP: &str = "https://idp.example";

    #[test]
    fn claims_are_read_from_a_signed_jwt_and_anything_else_is_invalid_identity_token() {
        let good = jwt(json!({ "iss": IDP, "sub": "u1", "exp": 2_000_000_000, "email": "Ann@Example.test" }));
        let c = claims(&good).unwrap();
        assert_eq!(
            (c.iss.as_str(), c.sub.as_str(), c.exp, c.email.as_deref()),
            (IDP, "u1", 2_000_000_000, Some("Ann@Example.test"))
        );
        let (h, p, _) = (good.split('.').next().unwrap(), good.split('.').nth(1).unwrap(), ());
        for bad in [
            String::new(),
            "a.b".into(),
            format!("{h}.{p}"),
            format!("{h}.{p}."),
            format!("{h}.{p}.sig.extra"),
            format!("{h}.!!.c2ln"),
            format!("{h}.{}.c2ln", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("[1]")),
            jwt(json!({ "sub": "u1", "exp": 1 })),
            jwt(json!({ "iss": IDP, "exp": 1 })),
            jwt(json!({ "iss": IDP, "sub": "u1", "exp": "soon" })),
            jwt(json!({ "iss": "", "sub": "u1", "exp": 1 })),
            "x".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            assert_eq!(claims(&bad).unwrap_err().code(), "invalid_identity_token", "{bad:.80}");
        }
    }

    #[test]
    fn a_token_must_come_from_the_provider_be_current_and_be_the_members() {
        let now = 1_900_000_000;
        let of = |v: serde_json::Value| claims(&jwt(v)).unwrap();
        let ann = member(Some("ann@example.test"));
        let by_email = of(json!({ "iss": IDP, "sub": "x", "exp": now + 60, "email": "ANN@example.test" }));
        by_email.check(IDP, now, &ann).unwrap();
        // The issuer is compared exactly, as configured: no normalised variant.
        assert_eq!(by_email.check("https://idp.example/", now, &ann).unwrap_err().code(), "invalid_identity_token");
        assert_eq!(by_email.check(IDP, now + 60, &ann).unwrap_err().code(), "invalid_identity_token");
        assert_eq!(by_email.check(IDP, now, &member(Some("bob@example.test"))).unwrap_err().code(), "identity_token_not_yours");
        assert_eq!(by_email.check(IDP, now, &member(None)).unwrap_err().code(), "identity_token_not_yours");
        let unverified =
            of(json!({ "iss": IDP, "sub": "x", "exp": now + 60, "email": "ann@example.test", "email_verified": false }));
        assert_eq!(unverified.check(IDP, now, &ann).unwrap_err().code(), "identity_token_not_yours");
        // A member who signed in through the provider itself is matched by principal.
        let mut signed_in_there = member(None);
        signed_in_there.issuer = IDP.into();
        let by_principal = of(json!({ "iss": IDP, "sub": "s-1", "exp": now + 60 }));
        by_principal.check(IDP, now, &signed_in_there).unwrap();
        assert_eq!(by_principal.check(IDP, now, &member(None)).unwrap_err().code(), "identity_token_not_yours");
    }

    #[test]
    fn basic_authentication_encodes_each_part_first() {
        let decoded = |h: String| {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(h.strip_prefix("Basic ").unwrap()).unwrap())
                .unwrap()
        };
        assert_eq!(decoded(basic("c", "s")), "c:s");
        assert_eq!(decoded(basic("a:b", "p w&")), "a%3Ab:p+w%26");
    }

    #[test]
    fn only_a_short_safe_error_code_is_kept() {
        assert_eq!(error_code(br#"{"error":"invalid_grant","error_description":"nope"}"#), "invalid_grant");
        assert_eq!(error_code(b"<html>"), "provider_error");
        assert_eq!(error_code(br#"{"error":"x y\n<script>"}"#), "provider_error");
    }

    proptest! {
        #[test]
        fn the_claims_parser_never_panics(token in ".{0,300}") {
            let _ = claims(&token);
        }

        #[test]
        fn the_claims_parser_reads_any_well_formed_token_back(
            iss in "[a-z:/.]{1,40}", sub in "[ -~]{1,40}", exp in 0i64..4_000_000_000, email in proptest::option::of("[a-z]{1,10}@[a-z]{1,10}")
        ) {
            let token = jwt(json!({ "iss": iss, "sub": sub, "exp": exp, "email": email }));
            let c = claims(&token).unwrap();
            prop_assert_eq!(c, Claims { iss, sub, email, email_verified: None, exp });
        }
    }
}
