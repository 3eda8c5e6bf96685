//! SSE framing of the legacy client (`gateway::sse::EventParser`): how a stream is cut into
//! chunks never changes its events or where it fails, and the events written back out as a
//! stream parse to themselves. An `endpoint` event resolves on the SSE URL's origin or is
//! refused.
#![no_main]
use std::collections::VecDeque;

use arbitrary::Arbitrary;
use gatehouse::gateway::sse::{Event, EventParser, resolve_endpoint};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    /// The event size bound, small so the fuzzer reaches it.
    max: u16,
    /// Where the stream is cut into chunks (offsets, taken modulo its length).
    cuts: Vec<u16>,
    stream: Vec<u8>,
}

fn parse(chunks: &[&[u8]], max: usize) -> (Vec<Event>, bool) {
    let mut parser = EventParser::new(max);
    let mut out = VecDeque::new();
    for chunk in chunks {
        if parser.feed(chunk, &mut out).is_err() {
            // Failed once, failed for good.
            assert!(parser.feed(b"data: x\n\n", &mut out).is_err());
            return (out.into(), true);
        }
    }
    (out.into(), false)
}

fuzz_target!(|input: Input| {
    let max = usize::from(input.max).max(1);
    let stream = &input.stream[..];
    let whole = parse(&[stream], max);
    let mut offsets: Vec<usize> =
        input.cuts.iter().filter(|_| !stream.is_empty()).map(|c| usize::from(*c) % (stream.len() + 1)).collect();
    offsets.sort_unstable();
    offsets.dedup();
    let mut chunks = Vec::new();
    let mut at = 0;
    for o in offsets {
        chunks.push(&stream[at..o]);
        at = o;
    }
    chunks.push(&stream[at..]);
    assert_eq!(parse(&chunks, max), whole, "chunks {chunks:?}");
    if stream.len() <= 2048 {
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(&bytes, max), whole, "byte by byte");
    }
    // Written back out, the events read the same (under a bound that fits the rewrite).
    let mut written = Vec::new();
    for event in &whole.0 {
        assert!(!event.kind.contains(['\n', '\r']));
        written.extend_from_slice(format!("event: {}\n", event.kind).as_bytes());
        for line in event.data.split('\n') {
            written.extend_from_slice(format!("data: {line}\n").as_bytes());
        }
        written.push(b'\n');
    }
    let (again, failed) = parse(&[&written], usize::MAX);
    assert!(!failed);
    assert_eq!(again, whole.0);
    let sse_url = url::Url::parse("https://mcp.example/sse?key=1").expect("a URL");
    for event in whole.0.iter().filter(|e| e.kind == "endpoint") {
        if let Ok(endpoint) = resolve_endpoint(&sse_url, &event.data) {
            assert_eq!(endpoint.origin(), sse_url.origin());
        }
    }
});
