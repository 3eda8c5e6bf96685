//! Redaction's custom-regex path (`workspaces::config::redaction`, issue 23 §4): any pattern is
//! refused with a message or compiles; a compiled detector scans any text without panicking,
//! and what it reports agrees with the pattern: a masking detector counts exactly the matches
//! in the text and rewrites the text exactly when there is one, a blocking one blocks exactly
//! when the pattern matches and rewrites nothing, and no rewrite grows past one marker per
//! match.
#![no_main]
use arbitrary::Arbitrary;
use gatehouse::workspaces::config::redaction::{Action, Detector, Redaction, Redactor, problem};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    pattern: String,
    text: String,
    block: bool,
}

fuzz_target!(|input: Input| {
    let action = if input.block { Action::Block } else { Action::Mask };
    let d = Detector { name: "custom".into(), regex: Some(input.pattern.clone()), action };
    if problem(&d).is_some() {
        return;
    }
    // It compiled under the same limits: the `regex` crate agrees, and it never matches "".
    let re = regex::Regex::new(&input.pattern).expect("a pattern the check accepted compiles");
    assert!(!re.is_match(""), "an accepted pattern matched the empty text");
    let redactor = Redactor::of(&Redaction { detectors: vec![d] }).expect("one detector");
    let mut scan = Default::default();
    let out = redactor.text(&input.text, &mut scan);
    let found = re.find_iter(&input.text).count();
    match action {
        Action::Block => {
            assert_eq!(scan.blocked.is_some(), found > 0);
            assert_eq!(scan.masked, 0);
            assert!(out.is_none(), "a blocking detector never rewrites the text");
        }
        Action::Mask => {
            assert!(scan.blocked.is_none());
            assert_eq!(scan.masked as usize, found);
            assert_eq!(out.is_some(), found > 0);
            if let Some(out) = out {
                let marker = "[redacted:custom]".len();
                assert!(out.len() <= input.text.len() + found * marker);
                assert!(out.contains("[redacted:custom]"));
            }
        }
    }
});
