//! The vault key ring (`GATEHOUSE_VAULT_KEYS`) and its envelopes (`vault`): a ring is refused
//! with a message or parsed into valid, distinct key ids whose keys seal what they open; an
//! envelope is refused as `Unreadable` or parsed from its one canonical text.
#![no_main]
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use gatehouse::vault::{Aad, Envelope, KeyRing, Owner, valid_kid};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    // The ring's spec, then (after a newline) an envelope to read.
    let (spec, envelope) = data.split_once('\n').unwrap_or((data, ""));
    if let Ok(parsed) = Envelope::parse(envelope) {
        let text =
            format!("v1.{}.{}.{}", parsed.kid, URL_SAFE_NO_PAD.encode(&parsed.nonce), URL_SAFE_NO_PAD.encode(&parsed.ciphertext));
        assert_eq!(text, envelope, "an envelope has one text");
        assert!(valid_kid(parsed.kid));
    }
    let Ok(ring) = KeyRing::parse(spec) else { return };
    let kids = ring.kids();
    assert!(!kids.is_empty());
    assert_eq!(ring.active(), kids[0]);
    for (i, kid) in kids.iter().enumerate() {
        assert!(valid_kid(kid));
        assert!(!kids[..i].contains(kid), "key id {kid} twice");
    }
    let aad =
        Aad { tenant: uuid::Uuid::nil(), workspace: uuid::Uuid::nil(), connector: "c", owner: Owner::Shared, purpose: "fuzz" };
    let _ = ring.open(&aad, envelope);
    let sealed = ring.seal(&aad, envelope.as_bytes());
    assert_eq!(Envelope::kid_of(&sealed), Some(ring.active()));
    assert_eq!(ring.open(&aad, &sealed).expect("opens what it sealed").as_slice(), envelope.as_bytes());
    let other = Aad { purpose: "other", ..aad };
    assert!(ring.open(&other, &sealed).is_err(), "another row's associated data does not open it");
    let (kid, signature) = ring.sign_link(spec.as_bytes());
    assert!(ring.verify_link(kid, spec.as_bytes(), &signature));
    assert!(!ring.verify_link(kid, envelope.as_bytes(), &signature) || envelope == spec);
});
