//! `WWW-Authenticate` parsing (`oauth::challenge`): a value is refused (`None`) or read into
//! challenges that, written back in the canonical form (quoted parameters), read the same.
#![no_main]
use gatehouse::oauth::challenge::{self, Challenge};
use libfuzzer_sys::fuzz_target;

fn write(challenges: &[Challenge]) -> String {
    let mut out = Vec::new();
    for c in challenges {
        let params: Vec<String> = c
            .params
            .iter()
            .map(|(name, value)| format!("{name}=\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        out.push(if params.is_empty() { c.scheme.clone() } else { format!("{} {}", c.scheme, params.join(", ")) });
    }
    out.join(", ")
}

fuzz_target!(|data: &str| {
    let _ = challenge::resource_metadata([data]);
    let _ = challenge::scopes([data]);
    let _ = challenge::insufficient_scope([data]);
    let Some(challenges) = challenge::parse(data) else { return };
    for c in &challenges {
        assert!(!c.scheme.is_empty());
        for (name, _) in &c.params {
            assert!(!name.is_empty() && *name == name.to_ascii_lowercase(), "{name:?}");
        }
    }
    let written = write(&challenges);
    assert_eq!(challenge::parse(&written).as_ref(), Some(&challenges), "written as {written:?}");
});
