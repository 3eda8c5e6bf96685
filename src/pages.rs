//! Minimal server-rendered HTML for the sign-in pages (the console issue brings templates).

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{Html, IntoResponse, Response},
};

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The development sign-in banner, shown on every page while it is active.
pub const DEV_BANNER: &str = "<p class=\"banner\" role=\"alert\"><strong>Development sign-in is active.</strong> \
Anyone can sign in as anyone. Set GATEHOUSE_OIDC_ISSUER (and GATEHOUSE_ENV=production) before real use.</p>";

/// A whole page. `body` must already be escaped HTML.
pub fn page(status: StatusCode, title: &str, dev_banner: bool, body: &str) -> Response {
    let banner = if dev_banner { DEV_BANNER } else { "" };
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{title} · Gatehouse</title><style>body{{font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}}\
         .banner{{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem}}label{{display:block;margin:.5rem 0}}</style></head>\
         <body>{banner}<h1>{title}</h1>{body}</body></html>",
        title = escape(title),
    );
    let mut response = (status, Html(html)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; form-action 'self' http: https:; frame-ancestors 'none'; base-uri 'none'"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An error page with the stable code shown to the person.
pub fn error_page(status: StatusCode, code: &str, message: &str, dev_banner: bool) -> Response {
    page(
        status,
        "Sign-in problem",
        dev_banner,
        &format!("<p>{}</p><p><code>{}</code></p><p><a href=\"/\">Start again</a></p>", escape(message), escape(code)),
    )
}

#[cfg(test)]
mod tests {
    use super::escape;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn escaped_text_has_no_markup(s in "\\PC{0,64}") {
            let e = escape(&s);
            prop_assert!(!e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''));
        }
    }
}
