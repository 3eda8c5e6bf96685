//! Redaction (issue 23 §4): a workspace's detectors, applied by the gateway to every tool
//! result before it reaches the agent or the stash, and to a call's arguments before anything
//! of them is recorded. Each detector masks what it finds or blocks the whole result. Built-ins
//! cover common secret formats; custom detectors are regular expressions of the `regex` crate,
//! whose matching is linear in the input (no backtracking), with a cap on the pattern's length
//! and compiled size and on the text scanned. Only counts leave this module, never contents.

use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Detectors per workspace.
pub const MAX_DETECTORS: usize = 32;
/// A custom pattern's length, in bytes.
pub const MAX_PATTERN_BYTES: usize = 512;
/// The compiled size of one pattern (the `regex` crate's own limit, in bytes).
const COMPILED_LIMIT: usize = 1 << 20;
/// Text scanned per value: a longer string is blocked, never passed unscanned.
pub const MAX_SCAN_BYTES: usize = 8 << 20;

/// The built-in detectors, by name.
pub const BUILTINS: [(&str, &str); 6] = [
    ("pem_private_key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*)"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"),
    ("gatehouse_token", r"\bgth_[A-Za-z0-9_-]{43}"),
    ("gatehouse_client_secret", r"\bgss_[A-Za-z0-9_-]{43}"),
    ("gatehouse_client_id", r"\bgsc_[A-Za-z0-9_-]{8,}"),
];

/// A workspace's redaction: its detectors, in order.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Redaction {
    #[serde(default)]
    pub detectors: Vec<Detector>,
}

impl Redaction {
    pub fn is_empty(&self) -> bool {
        self.detectors.is_empty()
    }
}

/// One detector: a built-in by name, or a custom regular expression with a name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Detector {
    /// A built-in's name (see [`BUILTINS`]); or, with `regex`, the custom detector's name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default)]
    pub action: Action,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Replace each match with `[redacted:<name>]`.
    #[default]
    Mask,
    /// Refuse the whole result with `redaction_blocked`.
    Block,
}

/// The compiled detectors of one configuration.
#[derive(Debug)]
pub struct Redactor {
    /// `None`: a detector that does not compile, which blocks everything.
    detectors: Vec<(String, Option<Regex>, Action)>,
}

/// What a scan found: matches masked, and the first blocking detector that matched.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    pub masked: u32,
    pub blocked: Option<String>,
}

/// Why a detector does not compile (for the configuration's validation).
pub fn problem(d: &Detector) -> Option<String> {
    compile(d).err()
}

fn compile(d: &Detector) -> Result<Regex, String> {
    let valid_name = !d.name.is_empty()
        && d.name.len() <= 64
        && d.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid_name {
        return Err("a detector name is 1 to 64 characters of a-z, 0-9, '_' and '-'".into());
    }
    let pattern = match &d.regex {
        None => match BUILTINS.iter().find(|(n, _)| *n == d.name) {
            Some((_, p)) => *p,
            None => return Err(format!("no built-in detector `{}` (custom ones need a `regex`)", d.name)),
        },
        Some(_) if BUILTINS.iter().any(|(n, _)| *n == d.name) => {
            return Err(format!("`{}` is a built-in; give the custom pattern another name", d.name));
        }
        Some(p) if p.len() > MAX_PATTERN_BYTES => return Err(format!("a pattern is at most {MAX_PATTERN_BYTES} bytes")),
        Some(p) if p.is_empty() => return Err("a pattern is not empty".into()),
        Some(p) => p.as_str(),
    };
    let re = RegexBuilder::new(pattern)
        .size_limit(COMPILED_LIMIT)
        .dfa_size_limit(COMPILED_LIMIT)
        .build()
        .map_err(|e| format!("the pattern does not compile: {}", first_line(&e.to_string())))?;
    if re.is_match("") {
        return Err("the pattern matches the empty text".into());
    }
    Ok(re)
}

fn first_line(text: &str) -> String {
    text.lines().last().unwrap_or(text).chars().take(200).collect()
}

impl Redactor {
    /// The compiled detectors; `None` when there are none (nothing to scan). A detector that
    /// does not compile was refused when the configuration was written; one that slips
    /// through (a document written before a limit) makes every result blocked.
    pub fn of(redaction: &Redaction) -> Option<Arc<Redactor>> {
        if redaction.is_empty() {
            return None;
        }
        let mut detectors = Vec::with_capacity(redaction.detectors.len());
        for d in &redaction.detectors {
            match compile(d) {
                Ok(re) => detectors.push((d.name.clone(), Some(re), d.action)),
                Err(_) => detectors.push((d.name.clone(), None, Action::Block)),
            }
        }
        Some(Arc::new(Redactor { detectors }))
    }

    /// Masks (in place) every string in `value`, keys aside, and counts.
    pub fn scan(&self, value: &mut Value) -> Scan {
        let mut scan = Scan::default();
        self.walk(value, &mut scan);
        scan
    }

    fn walk(&self, value: &mut Value, scan: &mut Scan) {
        match value {
            Value::String(s) => {
                if let Some(masked) = self.text(s, scan) {
                    *s = masked;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.walk(v, scan)),
            Value::Object(map) => map.values_mut().for_each(|v| self.walk(v, scan)),
            _ => {}
        }
    }

    /// The text with every match masked (`None`: unchanged).
    pub fn text(&self, text: &str, scan: &mut Scan) -> Option<String> {
        if text.len() > MAX_SCAN_BYTES {
            scan.blocked.get_or_insert_with(|| "too_large_to_scan".into());
            return None;
        }
        let mut current: Option<String> = None;
        for (name, re, action) in &self.detectors {
            let Some(re) = re else {
                scan.blocked.get_or_insert_with(|| name.clone());
                continue;
            };
            let haystack = current.as_deref().unwrap_or(text);
            let found = re.find_iter(haystack).count();
            if found == 0 {
                continue;
            }
            match action {
                Action::Block => {
                    scan.blocked.get_or_insert_with(|| name.clone());
                }
                Action::Mask => {
                    scan.masked = scan.masked.saturating_add(found as u32);
                    let replaced = re.replace_all(haystack, regex::NoExpand(&format!("[redacted:{name}]"))).into_owned();
                    current = Some(replaced);
                }
            }
        }
        current
    }
}

#[cfg(test)]
mod tests;
