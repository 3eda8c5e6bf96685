//! Snapshot files (`snapshots`): a file body is refused as not found (another tenant's, another
//! format, not a snapshot) or read, with its configuration document, into a value that writes
//! back out byte for byte; its owners and envelopes are read or refused, never a panic.
#![no_main]
use gatehouse::{
    ids::TenantId,
    snapshots,
    vault::{Envelope, slots::parse_owner},
};
use libfuzzer_sys::fuzz_target;

/// The tenant of every seed (a snapshot names it).
const TENANT: uuid::Uuid = uuid::Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);

fuzz_target!(|data: &[u8]| {
    let Ok((file, document)) = snapshots::parse_file(TenantId(TENANT), data) else { return };
    let text = serde_json::to_vec(&file).expect("serializes");
    let (again, again_document) = snapshots::parse_file(TenantId(TENANT), &text).expect("what it wrote reads");
    assert_eq!(serde_json::to_vec(&again).expect("serializes"), text);
    assert_eq!(again_document, document);
    for sealed in &file.credentials {
        if let Some(owner) = parse_owner(&sealed.owner) {
            assert_eq!(parse_owner(&owner.as_text()), Some(owner));
        }
        let _ = Envelope::parse(&sealed.sealed);
    }
    for part in file.subjects.values() {
        let _ = Envelope::parse(part);
    }
});
