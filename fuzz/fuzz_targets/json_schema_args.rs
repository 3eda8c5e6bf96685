//! The JSON Schema argument check (`gateway::downstream`): `[schema, arguments]` either does not
//! compile (a message) or gives at most three bounded issues, none exactly when the arguments
//! are valid, the same each time.
#![no_main]
use gatehouse::gateway::downstream::fuzzing::check;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return };
    let [Value::Object(schema), arguments] = &pair[..] else { return };
    let Ok(issues) = check(schema.clone(), arguments) else { return };
    assert!(issues.len() <= 3);
    for (_, message) in &issues {
        assert!(message.chars().count() <= 512);
    }
    assert_eq!(check(schema.clone(), arguments), Ok(issues));
});
