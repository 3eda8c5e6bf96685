//! What every noun's command line shares (each noun's own commands live in its `cli.rs`; the
//! binary only parses and dispatches): how a command ends, and small argument helpers.

use std::path::Path;

use crate::error::Error;

/// How a command ended when it did not fail. Only `Ok` exits 0: a refused compare-and-set
/// exits 3 and an absent key or slot exits 4, so scripts can branch without parsing output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Refused,
    Absent,
}

impl Outcome {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::Refused => 3,
            Outcome::Absent => 4,
        }
    }
}

/// Reads a JSON file named by the `field` flag (`invalid_json` when it is not JSON).
pub fn json_file(field: &'static str, path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)?;
    let value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid("invalid_json", Some(field), format!("{} is not JSON: {e}", path.display())))?;
    Ok(value)
}

/// `revoked` or `live`, for secrets listed one per line.
pub fn revoked_or_live(revoked_at: Option<chrono::DateTime<chrono::Utc>>) -> &'static str {
    if revoked_at.is_some() { "revoked" } else { "live" }
}

/// When a secret was last used, or `never`.
pub fn last_used(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map_or_else(|| "never".to_owned(), |t| t.to_rfc3339())
}
