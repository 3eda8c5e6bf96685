//! Headless Chromium for the console tests: chromedriver on a free loopback port, one
//! WebDriver session with a fresh profile, and screenshots of every page visited.

use std::{path::PathBuf, process::Stdio, time::Duration};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::common::{free_port, listening};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Chromium's focus emulation, a DevTools command sent through chromedriver: the page behaves
/// as if its window had the system's focus. Under chromedriver, headless Chromium 148 gives
/// the page no focus, so no `:focus` rule matches and the audit could not see a focus
/// indicator.
#[derive(Debug)]
struct FocusEmulation;

impl fantoccini::wd::WebDriverCompatibleCommand for FocusEmulation {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        let body = json!({ "cmd": "Emulation.setFocusEmulationEnabled", "params": { "enabled": true } });
        (axum::http::Method::POST, Some(body.to_string()))
    }
}

/// chromedriver on a free loopback port, and one headless Chromium session with a fresh profile.
pub struct Chrome {
    _driver: Child,
    _profile: PathBuf,
    pub client: Client,
    shots: PathBuf,
    prefix: &'static str,
    count: std::cell::Cell<u32>,
}

impl Chrome {
    /// `prefix` names this test's screenshots (tests run at once, each with its own browser).
    pub async fn start(prefix: &'static str) -> Chrome {
        Chrome::start_with(prefix, &[]).await
    }

    /// [`Chrome::start`] with extra command-line switches for the browser.
    pub async fn start_with(prefix: &'static str, switches: &[&str]) -> Chrome {
        assert!(
            std::path::Path::new(CHROMIUM).exists() && std::path::Path::new(CHROMEDRIVER).exists(),
            "Chromium is not installed: apt-get install chromium chromium-driver (.ci/run does)"
        );
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        assert!(listening(port, Duration::from_secs(30)).await, "chromedriver did not start");
        let profile = std::env::temp_dir().join(format!("gatehouse-chromium-{}", uuid::Uuid::new_v4().simple()));
        let mut caps = serde_json::Map::new();
        let mut args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.extend(switches.iter().map(|s| s.to_string()));
        caps.insert("goog:chromeOptions".into(), json!({ "binary": CHROMIUM, "args": args }));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session in headless Chromium");
        let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        Chrome { _driver: driver, _profile: profile, client, shots, prefix, count: std::cell::Cell::new(0) }
    }

    /// Saves a screenshot of the current page as `NN-name.png`; a console page must also pass
    /// the accessibility audit (`a11y.js`).
    pub async fn shot(&self, name: &str) {
        let n = self.count.get() + 1;
        self.count.set(n);
        // A click that submitted a form may still be navigating. Chromium 148 then refuses
        // the screenshot ("aborted by navigation: Not attached to an active page"), and it
        // is taken again once the new page is there.
        let mut attempt = 0;
        let png = loop {
            match self.client.screenshot().await {
                Ok(png) => break png,
                Err(e) if attempt < 3 => {
                    attempt += 1;
                    eprintln!("screenshot {name}, attempt {attempt}: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("screenshot {name}: {e}"),
            }
        };
        std::fs::write(self.shots.join(format!("{}-{n:02}-{name}.png", self.prefix)), png).unwrap();
        let url = self.url().await;
        if url::Url::parse(&url).is_ok_and(|u| u.path().starts_with("/console")) {
            self.client.issue_cmd(FocusEmulation).await.expect("focus emulation");
            let problems = self.client.execute(include_str!("a11y.js"), vec![]).await.expect("the accessibility audit runs");
            let problems: Vec<String> = serde_json::from_value(problems).expect("a list of problems");
            assert!(problems.is_empty(), "{name} ({url}) fails the accessibility audit:\n{}", problems.join("\n"));
            let serious = self.axe().await;
            assert!(serious.is_empty(), "{name} ({url}): axe-core finds serious or critical violations:\n{}", serious.join("\n"));
        }
    }

    /// axe-core (the npm package, installed with the test peers) on the current page: its
    /// serious and critical violations, each as `rule: help (elements)`. The library is sent
    /// as the WebDriver script itself (page CSP does not apply to it) once per page.
    pub async fn axe(&self) -> Vec<String> {
        let loaded = self.client.execute("return typeof window.axe !== 'undefined'", vec![]).await.unwrap();
        if loaded != serde_json::Value::Bool(true) {
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/node_modules/axe-core/axe.min.js");
            let source = std::fs::read_to_string(&path).expect("axe-core is installed with the test peers (scripts/test.sh)");
            self.client.execute(&format!("{source}\n;return true;"), vec![]).await.expect("axe-core loads");
        }
        let found = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 axe.run(document, { resultTypes: ['violations'] }).then((r) => done(r.violations
                   .filter((v) => v.impact === 'serious' || v.impact === 'critical')
                   .map((v) => v.id + ': ' + v.help + ' (' + v.nodes.map((n) => n.target.join(' ')).join(', ') + ')')),
                   (e) => done(['axe-core failed: ' + e]));",
                vec![],
            )
            .await
            .expect("axe-core runs");
        serde_json::from_value(found).expect("a list of violations")
    }

    pub async fn goto(&self, url: &str, name: &str) -> String {
        self.client.goto(url).await.unwrap();
        self.shot(name).await;
        self.client.source().await.unwrap()
    }

    pub async fn text(&self, css: &str) -> String {
        self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).text().await.unwrap()
    }

    pub async fn click(&self, css: &str) {
        self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).click().await.unwrap();
    }

    pub async fn fill(&self, css: &str, value: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    /// Waits (up to 30 s) until the element at `css` shows text containing `part`; its text.
    pub async fn shows(&self, css: &str, part: &str) -> String {
        // The text that showed it is answered as it was read: finding the element again could
        // meet a page that a form submission is replacing (a stale element).
        let shown = crate::common::eventually_some(std::time::Duration::from_secs(30), || {
            let client = self.client.clone();
            async move {
                let text = client.find(Locator::Css(css)).await.ok()?.text().await.ok()?;
                text.contains(part).then_some(text)
            }
        })
        .await;
        match shown {
            Some(text) => text,
            None => panic!("{css} never showed {part:?} (at {})", self.url().await),
        }
    }

    /// Chooses `value` in the `<select>` at `css`.
    pub async fn select(&self, css: &str, value: &str) {
        let chosen = self
            .client
            .execute(
                "const s = document.querySelector(arguments[0]); s.value = arguments[1]; return s.value === arguments[1];",
                vec![serde_json::json!(css), serde_json::json!(value)],
            )
            .await
            .unwrap();
        assert_eq!(chosen, serde_json::Value::Bool(true), "{css} has no option {value}");
    }

    pub async fn url(&self) -> String {
        self.client.current_url().await.unwrap().to_string()
    }

    /// Walks the provider's own login and consent pages until the console shows.
    pub async fn sign_in(&self, base: &str, login: &str) {
        self.client.goto(&format!("{base}/login?next=%2Fconsole")).await.unwrap();
        let mut seen_login = false;
        for _ in 0..40 {
            let url = self.url().await;
            if url.starts_with(&format!("{base}/console")) {
                assert!(seen_login, "the provider's login page was never shown");
                return;
            }
            // The built-in development provider's page (on Gatehouse itself). Its form posts
            // and redirects, so a field found while the post is under way can go stale; a
            // step that fails looks again.
            if url.starts_with(&format!("{base}/dev-idp")) {
                match self.dev_provider_step(login).await {
                    Ok(true) => seen_login = true,
                    Ok(false) => {}
                    Err(e) => eprintln!("development provider page changed during a step ({e}); looking again"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            // The provider's pages: its login form, then its consent form. The page can change
            // under a found element (the provider's own redirects), so a step that fails
            // looks again rather than panicking on a stale element.
            if !url.starts_with(base) {
                match self.provider_step(login).await {
                    Ok(Some(step)) => {
                        seen_login |= step == "provider-login";
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => eprintln!("provider page changed during a step ({e}); looking again"),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("sign-in did not reach the console; at {}: {}", self.url().await, self.client.source().await.unwrap());
    }

    /// One step on the development provider's page: fills and submits its form, then waits
    /// until the page it was on is gone. Answers whether it submitted.
    async fn dev_provider_step(&self, login: &str) -> Result<bool, fantoccini::error::CmdError> {
        let Ok(field) = self.client.find(Locator::Css("input[name=email]")).await else {
            return Ok(false);
        };
        self.shot("dev-provider").await;
        field.clear().await?;
        field.send_keys(&format!("{login}@example.test")).await?;
        self.client.find(Locator::Css("button[type=submit]")).await?.click().await?;
        self.until_gone(&field).await;
        Ok(true)
    }

    /// Waits (at most 5 s) until an element's page has been replaced, so the next look sees
    /// the page a submit led to rather than the one it left.
    async fn until_gone(&self, element: &fantoccini::elements::Element) {
        for _ in 0..50 {
            if element.is_displayed().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One step on the provider's pages: fills and submits its login form, or submits its
    /// consent form. Answers the step taken, or `None` when the page shows neither.
    async fn provider_step(&self, login: &str) -> Result<Option<&'static str>, fantoccini::error::CmdError> {
        if let Ok(field) = self.client.find(Locator::Css("input[name=login]")).await {
            self.shot("provider-login").await;
            field.clear().await?;
            field.send_keys(login).await?;
            let password = self.client.find(Locator::Css("input[name=password]")).await?;
            password.clear().await?;
            password.send_keys("any").await?;
            self.client.find(Locator::Css("button[type=submit]")).await?.click().await?;
            self.until_gone(&field).await;
            return Ok(Some("provider-login"));
        }
        if let Ok(button) = self.client.find(Locator::Css("button[type=submit]")).await {
            self.shot("provider-consent").await;
            button.click().await?;
            self.until_gone(&button).await;
            return Ok(Some("provider-consent"));
        }
        Ok(None)
    }

    /// The session cookie, for HTTP checks the browser cannot make (exact status codes).
    pub async fn session_cookie(&self) -> String {
        let cookies = self.client.get_all_cookies().await.unwrap();
        let c = cookies.iter().find(|c| c.name() == gatehouse::sessions::cookie_name(false)).expect("a session cookie");
        format!("{}={}", c.name(), c.value())
    }
}

impl Chrome {
    /// Lets a too-long value through the browser's own `maxlength`, so the server's check is
    /// what refuses it.
    pub async fn execute_remove_maxlength(&self) {
        self.client.execute("document.getElementById('token-name').removeAttribute('maxlength')", vec![]).await.unwrap();
        self.fill("#token-name", &"x".repeat(81)).await;
    }
}
