//! Anti-entropy's lists at 100,000 held memories on a ring of three members (every member holds
//! every memory): what a node computes before each round with a peer (`memory::sync`).
//!
//! - `build`: the lists made anew, one owner walk per held entry and every list hashed — what the
//!   node did before every round after any write, and still does when the view changes;
//! - `update_100_writes`: the lists of the previous round updated by the difference of two
//!   snapshots after 100 writes (only those entries walked; the lists they touch rehashed);
//! - `update_no_write`: the same with nothing written (lists and digests kept);
//! - `digest_100k`: hashing one list of 100,000 versions (the floor of an update with writes).
//!
//! Run: `cargo bench -p agora-hyperspace --bench memory_sync`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_hyperspace::memory::record::Version;
use agora_hyperspace::memory::ring::Ring;
use agora_hyperspace::memory::sync::{SyncLists, VersionMap, Versions};
use criterion::{Criterion, criterion_group, criterion_main};

const HELD: u64 = 100_000;
const ME: &str = "12D3KooWMemberA1111111111111111111111111111111111111";

fn id(i: u64) -> String {
    format!("mem-{:024x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8)
}

fn version(ts: u64) -> Version {
    Version {
        timestamp_ms: 1_795_000_000_000 + ts,
        peer_id: ME.to_owned(),
    }
}

fn bench(c: &mut Criterion) {
    let mut ring = Ring::new();
    for m in [
        ME,
        "12D3KooWMemberB2222222222222222222222222222222222222",
        "12D3KooWMemberC3333333333333333333333333333333333333",
    ] {
        ring.add(m);
    }
    let before: VersionMap = (0..HELD).map(|i| (id(i), version(i))).collect();
    let lists = SyncLists::build(&before, &ring, ME);
    assert_eq!(lists.pairs.len(), 2);
    let mut after = before.clone();
    for i in 0..100 {
        // 50 new memories, 50 newer versions of held ones
        if i % 2 == 0 {
            after.insert(id(HELD + i), version(HELD + i));
        } else {
            after.insert(id(i * 997), version(HELD + i));
        }
    }
    let (updated, built) = (
        lists.update(&before, &after, &ring, ME),
        SyncLists::build(&after, &ring, ME),
    );
    for (m, v) in &built.pairs {
        assert_eq!(updated.pairs[m].digest, v.digest, "{m}");
    }

    let mut g = c.benchmark_group("memory_sync_100k");
    g.sample_size(20);
    g.bench_function("build", |b| {
        b.iter(|| SyncLists::build(black_box(&after), &ring, ME));
    });
    g.bench_function("update_100_writes", |b| {
        b.iter(|| lists.update(black_box(&before), black_box(&after), &ring, ME));
    });
    g.bench_function("update_no_write", |b| {
        b.iter(|| lists.update(black_box(&before), black_box(&before), &ring, ME));
    });
    g.bench_function("digest_100k", |b| {
        b.iter(|| Versions::new(black_box(before.clone())).digest);
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
