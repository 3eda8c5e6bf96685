//! How console pages are answered: rendering a template, the error page (or the way to sign
//! in), a form's shown error, and how people and times read on a page.

use askama::Template;
use axum::{
    http::{StatusCode, header},
    response::{IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};

use crate::error::Error;

/// How a person is named on a page.
pub fn who(email: Option<&str>, name: Option<&str>, subject: &str) -> String {
    email.or(name).unwrap_or(subject).to_owned()
}

/// Times on pages: UTC, to the minute; the full instant is in the `datetime` attribute.
pub fn when(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

pub fn when_opt(at: &Option<DateTime<Utc>>) -> String {
    at.as_ref().map(when).unwrap_or_else(|| "never".into())
}

/// Renders a template; a template error is an internal error (logged, never shown).
pub fn render<T: Template>(status: StatusCode, page: &T) -> Result<Response, PageError> {
    let html = page.render().map_err(|e| Error::Internal(anyhow::anyhow!("template: {e}")))?;
    Ok((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

/// A problem shown to a person in place of the page they asked for.
pub struct FormError {
    pub code: String,
    pub message: String,
    /// The fields the error names, each with what is wrong with it (as the API reports them:
    /// every issue of an invalid configuration, or the one field of an invalid value).
    pub fields: Vec<(String, String)>,
}

impl FormError {
    /// An error of the console's own (a form check the API does not make).
    pub fn new(code: &str, message: impl Into<String>) -> FormError {
        FormError { code: code.to_owned(), message: message.into(), fields: Vec::new() }
    }

    /// Client errors (bad input, a conflict, a missing object) are shown next to the form;
    /// anything else becomes an error page.
    pub fn of(e: Error) -> Result<FormError, PageError> {
        match e.status() {
            s if s.is_client_error() && s != StatusCode::UNAUTHORIZED && s != StatusCode::FORBIDDEN => {
                let fields = match &e {
                    Error::InvalidConfig { issues } => issues.iter().map(|i| (i.field.clone(), i.message.clone())).collect(),
                    Error::Invalid { field: Some(field), message, .. } => vec![((*field).to_owned(), message.clone())],
                    _ => Vec::new(),
                };
                Ok(FormError { code: e.code().to_owned(), message: e.to_string(), fields })
            }
            _ => Err(e.into()),
        }
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage<'a> {
    status: u16,
    code: &'a str,
    message: &'a str,
}

/// An error answered as an HTML page with its status and stable code. A person who is not
/// signed in and asked for a page is sent to sign in, and back.
pub struct PageError {
    error: Error,
    next: Option<String>,
}

impl PageError {
    pub(super) fn with_next(error: Error, next: &str) -> PageError {
        PageError { error, next: Some(next.to_owned()) }
    }
}

impl From<Error> for PageError {
    fn from(error: Error) -> Self {
        PageError { error, next: None }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let e = self.error;
        // A moved tenant's pages redirect to the same page at its new deployment.
        if let Error::Moved { base_url, location, .. } = e {
            return Error::Moved { base_url, location, redirect: true }.into_response();
        }
        if matches!(e, Error::Unauthorized)
            && let Some(next) = self.next
        {
            let target = url::form_urlencoded::Serializer::new(String::new()).append_pair("next", &next).finish();
            return Redirect::to(&format!("/login?{target}")).into_response();
        }
        let status = e.status();
        let message = if status.is_server_error() {
            tracing::error!(error = %e, "console page failed");
            "internal error".to_owned()
        } else {
            e.to_string()
        };
        let page = ErrorPage { status: status.as_u16(), code: e.code(), message: &message };
        match page.render() {
            Ok(html) => (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
            Err(_) => (status, "error").into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unauthenticated_page_request_goes_to_sign_in_and_back() {
        let r = PageError::with_next(Error::Unauthorized, "/console/t/acme/tokens?x=1").into_response();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[header::LOCATION], "/login?next=%2Fconsole%2Ft%2Facme%2Ftokens%3Fx%3D1");
    }

    async fn body(r: Response) -> String {
        String::from_utf8(axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn errors_are_pages_with_status_and_code_and_internal_ones_leak_nothing() {
        let r = PageError::from(Error::Forbidden { code: "csrf_failed", message: "missing or wrong CSRF token".into() })
            .into_response();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(r.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
        assert!(body(r).await.contains("<code id=\"error-code\">csrf_failed</code>"));
        let r = PageError::from(Error::Internal(anyhow::anyhow!("db password is hunter2"))).into_response();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let page = body(r).await;
        assert!(!page.contains("hunter2") && page.contains("internal error"), "{page}");
    }

    #[tokio::test]
    async fn messages_are_escaped() {
        let r = PageError::from(Error::invalid("invalid_name", Some("name"), "<script>alert(1)</script>")).into_response();
        let page = body(r).await;
        assert!(!page.contains("<script>alert"), "{page}");
    }
}
