//! The hash map of the lookups every call makes in memory: downstream sessions and catalogs,
//! compiled schemas, epoch caches, applied epochs, quota windows and connector keys.
//!
//! foldhash, seeded at random per process, instead of the standard library's SipHash: with a
//! dozen such lookups per `tools/call`, SipHash was 2.5% of a call's instructions (callgrind,
//! docs/benchmarks.md). The keys are tenant ids and keys this gateway derives from a
//! tenant's own configuration; a tenant can make only as many of them as its connectors and
//! workspaces, so the stronger flooding resistance of SipHash buys nothing here. Maps keyed
//! by what a request names directly keep the standard hasher.

/// A `HashMap` with foldhash's per-process random seed; build one with `FastMap::default()`.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
