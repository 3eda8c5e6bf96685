//! A cookie-keeping HTTP client that follows redirects by hand and submits the forms it meets,
//! the way a person's browser would walk through a sign-in (no JavaScript needed).
#![allow(dead_code)]

use reqwest::{Client, Method, StatusCode};
use url::Url;

#[derive(Clone)]
pub struct Browser {
    pub client: Client,
    /// Gatehouse's base URL: walking stops on the first page of it that is not part of sign-in.
    pub base: String,
}

/// Where a walk ended.
#[derive(Debug)]
pub struct Landing {
    pub status: StatusCode,
    pub url: String,
    pub body: String,
}

impl Browser {
    pub fn new(base: &str) -> Browser {
        gatehouse::install_crypto();
        let client = Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Browser { client, base: base.to_owned() }
    }

    fn is_sign_in_step(&self, url: &str) -> bool {
        match url.strip_prefix(&self.base) {
            None => true,
            Some(path) => path.starts_with("/login") || path.starts_with("/auth/") || path.starts_with("/dev-idp/"),
        }
    }

    /// Walks from `start`: follows redirects, fills and posts forms with `fill(field)` (or the
    /// form's own value), until it lands on a Gatehouse page outside sign-in or an error.
    pub async fn walk(&self, start: &str, fill: impl Fn(&str) -> Option<String>) -> Landing {
        match self.stroll(start, None, fill).await {
            Ok(landing) => landing,
            Err(stopped) => unreachable!("no stop was given, yet the walk stopped at {stopped}"),
        }
    }

    /// Walks from `start` like [`Browser::walk`], filling forms with `fill(field)`, and stops at
    /// the first redirect to a URL that starts with `stop`, which it returns unfollowed (e.g.
    /// Gatehouse's callback, for a test that wants to time that request itself).
    pub async fn walk_until(&self, start: &str, stop: &str, fill: impl Fn(&str) -> Option<String>) -> String {
        match self.stroll(start, Some(stop), fill).await {
            Err(stopped) => stopped,
            Ok(landing) => panic!("the walk did not reach {stop}: {} {} {}", landing.status, landing.url, landing.body),
        }
    }

    /// The walk of [`Browser::walk`] (`stop` `None`: `Ok` with the landing page) and of
    /// [`Browser::walk_until`] (`Err` with the redirect to `stop`; every page on the way must
    /// hold a form).
    async fn stroll(&self, start: &str, stop: Option<&str>, fill: impl Fn(&str) -> Option<String>) -> Result<Landing, String> {
        let mut method = Method::GET;
        let mut url = Url::parse(start).unwrap();
        let mut form: Vec<(String, String)> = Vec::new();
        for _ in 0..25 {
            let request = self.client.request(method.clone(), url.clone());
            let request = if method == Method::POST { request.form(&form) } else { request };
            let response = request.send().await.unwrap();
            let status = response.status();
            if status.is_redirection() {
                let location = response.headers()["location"].to_str().unwrap().to_owned();
                url = url.join(&location).unwrap();
                method = Method::GET;
                match stop {
                    Some(stop) if url.as_str().starts_with(stop) => return Err(url.to_string()),
                    None if !self.is_sign_in_step(url.as_str()) => {
                        let landing = self.client.get(url.clone()).send().await.unwrap();
                        return Ok(Landing {
                            status: landing.status(),
                            url: url.to_string(),
                            body: landing.text().await.unwrap(),
                        });
                    }
                    _ => continue,
                }
            }
            let body = response.text().await.unwrap();
            let next = match (first_form(&body), stop) {
                (Some(next), Some(_)) => next,
                (Some(next), None) if status == StatusCode::OK && self.is_sign_in_step(url.as_str()) => next,
                (None, Some(_)) => panic!("no form at {url}: {status} {body}"),
                _ => return Ok(Landing { status, url: url.to_string(), body }),
            };
            let (action, fields) = next;
            url = url.join(&action).unwrap();
            method = Method::POST;
            form = fields.into_iter().map(|(k, v)| (k.clone(), fill(&k).unwrap_or(v))).collect();
        }
        panic!("the walk from {start} did not finish");
    }

    /// The CSRF token of the signed-in session (from `/api/v1/me`).
    pub async fn csrf(&self) -> String {
        let me: serde_json::Value =
            self.client.get(format!("{}/api/v1/me", self.base)).send().await.unwrap().json().await.unwrap();
        me["csrf_token"].as_str().expect("signed in").to_owned()
    }

    /// A same-origin API write with the session's CSRF token.
    pub async fn write(&self, method: Method, path: &str, body: serde_json::Value) -> reqwest::Response {
        let csrf = self.csrf().await;
        self.same_origin(method, path, &csrf, body).send().await.unwrap()
    }

    /// [`Browser::write`] where the server may be unreachable or failing (a load test):
    /// `None` when no answer came, else the status and the JSON body (`null` if none).
    pub async fn try_write(&self, method: Method, path: &str, body: serde_json::Value) -> Option<(u16, serde_json::Value)> {
        let me: serde_json::Value = self.client.get(format!("{}/api/v1/me", self.base)).send().await.ok()?.json().await.ok()?;
        let csrf = me["csrf_token"].as_str()?.to_owned();
        let r = self.same_origin(method, path, &csrf, body).send().await.ok()?;
        let status = r.status().as_u16();
        Some((status, r.json().await.unwrap_or(serde_json::Value::Null)))
    }

    fn same_origin(&self, method: Method, path: &str, csrf: &str, body: serde_json::Value) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("origin", &self.base)
            .header("x-csrf-token", csrf)
            .json(&body)
    }
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let needle = format!("{name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(unescape(&tag[start..end]))
}

/// The value of the first `csrf_token` field of a console page (every console form has one).
pub fn csrf_field(html: &str) -> Option<String> {
    let needle = "name=\"csrf_token\" value=\"";
    let start = html.find(needle)? + needle.len();
    let end = html[start..].find('"')? + start;
    Some(unescape(&html[start..end]))
}

/// The first POST form of a page: its action and its named inputs with their values.
pub fn first_form(html: &str) -> Option<(String, Vec<(String, String)>)> {
    let start = html.find("<form")?;
    let end = html[start..].find("</form>").map_or(html.len(), |e| start + e);
    let form = &html[start..end];
    let open_end = form.find('>')?;
    let action = attr(&form[..open_end], "action").unwrap_or_default();
    let mut fields = Vec::new();
    let mut rest = form;
    while let Some(i) = rest.find("<input") {
        let tag_end = rest[i..].find('>').map_or(rest.len(), |e| i + e);
        let tag = &rest[i..tag_end];
        if let Some(name) = attr(tag, "name") {
            fields.push((name, attr(tag, "value").unwrap_or_default()));
        }
        rest = &rest[tag_end..];
    }
    Some((action, fields))
}
