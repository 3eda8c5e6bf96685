//! The workspace's approval policy: which writes a person must approve before the gateway
//! makes them, for which callers, and how long an approval stays valid.

use serde::{Deserialize, Serialize};

use super::{Caller, grant_applies};

/// How long an approval stays valid when a rule says nothing (15 minutes).
pub const DEFAULT_EXPIRY_S: u32 = 900;
/// The longest an approval may stay valid (a day).
pub const MAX_EXPIRY_S: u32 = 86_400;
/// The shortest (a minute).
pub const MIN_EXPIRY_S: u32 = 60;
/// Rules per workspace.
pub const MAX_RULES: usize = 64;

/// One rule: the writes of `tools` made by a caller `to` names need an approval.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Connector ids (every write of the connector) or exact `connector.tool` addresses.
    pub tools: Vec<String>,
    /// `role:<role>`, `member:<member id>` or `machines` (tokens that carry no person), as in
    /// grants. Absent: every caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Vec<String>>,
    /// Seconds an approval stays valid after it is requested (60 to 86,400; default 900).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u32>,
}

impl Rule {
    fn applies(&self, caller: &Caller, connector: &str, tool: &str) -> bool {
        let covers = self.tools.iter().any(|t| match t.split_once('.') {
            None => t == connector,
            Some((c, n)) => c == connector && n == tool,
        });
        covers && self.to.as_ref().is_none_or(|to| to.iter().any(|t| grant_applies(t, caller)))
    }
}

/// Whether a write of `connector.tool` by `caller` needs an approval under `rules`, and if so
/// for how long one stays valid (the shortest of the rules that apply).
pub fn required(rules: &[Rule], caller: &Caller, connector: &str, tool: &str) -> Option<u32> {
    rules.iter().filter(|r| r.applies(caller, connector, tool)).map(|r| r.expires_in_s.unwrap_or(DEFAULT_EXPIRY_S)).min()
}

/// The problems of the rules, each naming its field (`known` says whether a connector exists).
pub(super) fn issues(rules: &[Rule], known: &dyn Fn(&str) -> bool, bad: &mut dyn FnMut(String, &str)) {
    if rules.len() > MAX_RULES {
        bad("approvals".into(), "at most 64 approval rules");
    }
    for (i, rule) in rules.iter().enumerate() {
        if rule.tools.is_empty() {
            bad(format!("approvals.{i}.tools"), "a rule names at least one connector or tool");
        }
        for t in &rule.tools {
            let ok = match t.split_once('.') {
                None => known(t),
                Some((c, tool)) => known(c) && !tool.is_empty(),
            };
            if !ok {
                bad(format!("approvals.{i}.tools.{t}"), "names no connector of this workspace");
            }
        }
        for (j, to) in rule.to.iter().flatten().enumerate() {
            let ok = to == "machines"
                || to.strip_prefix("role:").is_some_and(|r| crate::members::Role::parse(r).is_ok())
                || to.strip_prefix("member:").is_some_and(|m| m.parse::<uuid::Uuid>().is_ok());
            if !ok {
                bad(format!("approvals.{i}.to.{j}"), "is role:<role>, member:<member id> or machines");
            }
        }
        if rule.expires_in_s.is_some_and(|s| !(MIN_EXPIRY_S..=MAX_EXPIRY_S).contains(&s)) {
            bad(format!("approvals.{i}.expires_in_s"), "is from 60 to 86400 seconds");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::members::Role;

    fn rule(tools: &[&str], to: Option<&[&str]>) -> Rule {
        Rule {
            tools: tools.iter().map(|s| s.to_string()).collect(),
            to: to.map(|t| t.iter().map(|s| s.to_string()).collect()),
            expires_in_s: None,
        }
    }

    #[test]
    fn a_rule_names_tools_or_whole_connectors_for_roles_or_machines() {
        let machine = Caller::default();
        let member = Caller { role: Some(Role::Member), member_id: Some(uuid::Uuid::nil()) };
        let rules = [rule(&["crm.delete"], None), rule(&["files"], Some(&["machines"]))];
        assert_eq!(required(&rules, &member, "crm", "delete"), Some(DEFAULT_EXPIRY_S));
        assert_eq!(required(&rules, &member, "crm", "update"), None);
        assert_eq!(required(&rules, &member, "files", "rm"), None, "the files rule is for machines only");
        assert_eq!(required(&rules, &machine, "files", "rm"), Some(DEFAULT_EXPIRY_S));
        let short = Rule { expires_in_s: Some(120), ..rule(&["crm"], Some(&["role:member"])) };
        assert_eq!(required(&[rules[0].clone(), short], &member, "crm", "delete"), Some(120), "the shortest applies");
    }
}
