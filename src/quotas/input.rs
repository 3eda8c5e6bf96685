//! What a limit is made of, and the checks an input passes before anything is stored: every
//! refusal names its field with a stable code.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The largest budget of any kind (a slice is at most this, and sums stay in `i32`).
pub const MAX_BUDGET: i32 = 1_000_000_000;
/// Limits one tenant may hold.
pub const MAX_LIMITS: i64 = 200;

/// Whose calls one budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// Every call of the tenant, together.
    Tenant,
    /// Each access token or service credential on its own.
    Token,
    /// Each member on their own (all their tokens together); a machine without a person
    /// counts as its own token.
    Member,
}

impl Per {
    pub fn as_str(self) -> &'static str {
        match self {
            Per::Tenant => "tenant",
            Per::Token => "token",
            Per::Member => "member",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Per> {
        match s {
            "tenant" => Ok(Per::Tenant),
            "token" => Ok(Per::Token),
            "member" => Ok(Per::Member),
            _ => Err(Error::invalid("invalid_quota_per", Some("per"), "per is `tenant`, `token` or `member`")),
        }
    }
}

/// Which calls by classification one limit counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Calls {
    Read,
    Write,
    #[default]
    Any,
}

impl Calls {
    pub fn as_str(self) -> &'static str {
        match self {
            Calls::Read => "read",
            Calls::Write => "write",
            Calls::Any => "any",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Calls> {
        match s {
            "read" => Ok(Calls::Read),
            "write" => Ok(Calls::Write),
            "any" => Ok(Calls::Any),
            _ => Err(Error::invalid("invalid_quota_class", Some("class"), "class is `read`, `write` or `any`")),
        }
    }
}

/// A limit to create, or the new state of one (`version` required then).
#[derive(Clone, Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitInput {
    /// Lower-case letters, digits, `-` and `_`, up to 63; unique in the tenant.
    pub name: String,
    pub per: Option<Per>,
    /// The connector whose calls count (any connector when absent).
    pub connector: Option<String>,
    /// One tool of `connector` (any of its tools when absent).
    pub tool: Option<String>,
    /// `read`, `write` or `any` (the default).
    pub class: Option<Calls>,
    /// Calls admitted per window of `window_seconds` (both or neither).
    pub requests: Option<i32>,
    pub window_seconds: Option<i32>,
    /// Calls in flight at once.
    pub concurrency: Option<i32>,
    /// Calls admitted per UTC day.
    pub daily: Option<i32>,
    /// Admit calls uncounted when the database cannot lease more budget (default: refuse).
    #[serde(default)]
    pub fail_open: bool,
    /// On an update: the version it was made from.
    pub version: Option<i64>,
}

/// A checked input.
#[derive(Clone, Debug)]
pub struct Checked {
    pub name: String,
    pub per: Per,
    pub connector: Option<String>,
    pub tool: Option<String>,
    pub class: Calls,
    pub requests: Option<(i32, i32)>,
    pub concurrency: Option<i32>,
    pub daily: Option<i32>,
    pub fail_open: bool,
}

fn budget(value: Option<i32>, code: &'static str, field: &'static str) -> Result<Option<i32>> {
    match value {
        Some(n) if !(1..=MAX_BUDGET).contains(&n) => {
            Err(Error::invalid(code, Some(field), format!("{field} is between 1 and {MAX_BUDGET}")))
        }
        v => Ok(v),
    }
}

fn name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

/// A connector id or tool name as the gateway addresses it: printable, no dot in a connector.
fn part_ok(s: &str, dot: bool) -> bool {
    !s.is_empty() && s.len() <= 128 && s.chars().all(|c| !c.is_control() && !c.is_whitespace() && (dot || c != '.'))
}

pub fn check(input: &LimitInput) -> Result<Checked> {
    if !name_ok(&input.name) {
        return Err(Error::invalid(
            "invalid_quota_name",
            Some("name"),
            "name is 1 to 63 lower-case letters, digits, `-` or `_`, starting with a letter or digit",
        ));
    }
    let per = input.per.ok_or(Error::invalid("invalid_quota_per", Some("per"), "per is `tenant`, `token` or `member`"))?;
    if let Some(c) = &input.connector
        && !part_ok(c, false)
    {
        return Err(Error::invalid("invalid_quota_connector", Some("connector"), "connector is a connector id of a workspace"));
    }
    match (&input.connector, &input.tool) {
        (None, Some(_)) => {
            return Err(Error::invalid("invalid_quota_tool", Some("tool"), "a tool limit names its connector too"));
        }
        (_, Some(t)) if !part_ok(t, true) => {
            return Err(Error::invalid("invalid_quota_tool", Some("tool"), "tool is a tool name of the connector"));
        }
        _ => {}
    }
    let requests = budget(input.requests, "invalid_quota_requests", "requests")?;
    let window = match input.window_seconds {
        Some(w) if !(1..=86_400).contains(&w) => {
            return Err(Error::invalid("invalid_quota_window", Some("window_seconds"), "window_seconds is between 1 and 86400"));
        }
        w => w,
    };
    let requests = match (requests, window) {
        (Some(r), Some(w)) => Some((r, w)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(Error::invalid("invalid_quota_window", Some("window_seconds"), "requests needs window_seconds"));
        }
        (None, Some(_)) => {
            return Err(Error::invalid("invalid_quota_requests", Some("requests"), "window_seconds needs requests"));
        }
    };
    let concurrency = budget(input.concurrency, "invalid_quota_concurrency", "concurrency")?;
    let daily = budget(input.daily, "invalid_quota_daily", "daily")?;
    if requests.is_none() && concurrency.is_none() && daily.is_none() {
        return Err(Error::invalid(
            "quota_without_budget",
            None,
            "a limit sets requests and window_seconds, concurrency, daily, or several of them",
        ));
    }
    Ok(Checked {
        name: input.name.clone(),
        per,
        connector: input.connector.clone(),
        tool: input.tool.clone(),
        class: input.class.unwrap_or_default(),
        requests,
        concurrency,
        daily,
        fail_open: input.fail_open,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn base() -> LimitInput {
        LimitInput {
            name: "writes".into(),
            per: Some(Per::Token),
            requests: Some(10),
            window_seconds: Some(60),
            ..Default::default()
        }
    }

    fn code(input: &LimitInput) -> &'static str {
        match check(input) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn each_field_has_its_code() {
        assert_eq!(code(&base()), "ok");
        assert_eq!(code(&LimitInput { name: "Bad Name".into(), ..base() }), "invalid_quota_name");
        assert_eq!(code(&LimitInput { name: "".into(), ..base() }), "invalid_quota_name");
        assert_eq!(code(&LimitInput { per: None, ..base() }), "invalid_quota_per");
        assert_eq!(code(&LimitInput { tool: Some("t".into()), ..base() }), "invalid_quota_tool");
        assert_eq!(code(&LimitInput { connector: Some("a.b".into()), ..base() }), "invalid_quota_connector");
        assert_eq!(code(&LimitInput { requests: Some(0), ..base() }), "invalid_quota_requests");
        assert_eq!(code(&LimitInput { window_seconds: Some(86_401), ..base() }), "invalid_quota_window");
        assert_eq!(code(&LimitInput { window_seconds: None, ..base() }), "invalid_quota_window");
        assert_eq!(code(&LimitInput { requests: None, ..base() }), "invalid_quota_requests");
        assert_eq!(code(&LimitInput { concurrency: Some(-1), ..base() }), "invalid_quota_concurrency");
        assert_eq!(code(&LimitInput { daily: Some(MAX_BUDGET + 1), ..base() }), "invalid_quota_daily");
        let none = LimitInput { requests: None, window_seconds: None, ..base() };
        assert_eq!(code(&none), "quota_without_budget");
        assert_eq!(code(&LimitInput { concurrency: Some(4), ..none.clone() }), "ok");
        assert_eq!(code(&LimitInput { daily: Some(4), ..none }), "ok");
        let tool = LimitInput { connector: Some("github".into()), tool: Some("create.issue".into()), ..base() };
        assert_eq!(code(&tool), "ok");
    }

    proptest! {
        /// Whatever the input, the check answers (never panics), and what it accepts keeps
        /// every budget inside its bounds.
        #[test]
        fn accepted_inputs_are_in_bounds(
            name in "[a-zA-Z0-9_ .-]{0,70}",
            requests in proptest::option::of(-5i32..2_000_000_000),
            window in proptest::option::of(-5i32..100_000),
            concurrency in proptest::option::of(-5i32..2_000_000_000),
            daily in proptest::option::of(-5i32..2_000_000_000),
            connector in proptest::option::of("[a-z.]{0,5}"),
            tool in proptest::option::of("[a-z. ]{0,5}"),
        ) {
            let input = LimitInput {
                name, per: Some(Per::Member), connector, tool, class: None, requests, window_seconds: window,
                concurrency, daily, fail_open: false, version: None,
            };
            if let Ok(c) = check(&input) {
                prop_assert!(name_ok(&c.name));
                prop_assert!(c.requests.is_some() || c.concurrency.is_some() || c.daily.is_some());
                if let Some((r, w)) = c.requests {
                    prop_assert!((1..=MAX_BUDGET).contains(&r) && (1..=86_400).contains(&w));
                }
                for b in [c.concurrency, c.daily].into_iter().flatten() {
                    prop_assert!((1..=MAX_BUDGET).contains(&b));
                }
                prop_assert!(c.tool.is_none() || c.connector.is_some());
            }
        }
    }
}
