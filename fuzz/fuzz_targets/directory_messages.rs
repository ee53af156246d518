//! `directory_messages`: arbitrary bytes as the directory's node-to-node messages
//! (`agora_directory::ask`: a gossip ask, a request and a response on `/agora/directory/1.0.0`)
//! and as `directory.search`'s params.
//!
//! Properties checked: nothing panics; whatever decodes re-encodes to bytes that decode to the
//! same message; a decoded ask or search is local; answers keep at most `MAX_REMOTE_HITS` hits;
//! params that compile give a limit within 1..=100 and a query within its byte bound.
#![no_main]

use agora_directory::ask::{self, Ask, Request, Response};
use agora_directory::merge::MAX_REMOTE_HITS;
use agora_directory::query::{MAX_LIMIT, MAX_QUERY_BYTES};
use agora_directory::{Scope, SearchParams};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = Ask::decode(data) {
        assert_eq!(a.params.scope, Some(Scope::Local));
        assert_eq!(Ask::decode(&ask::encode(&a)).ok(), Some(a));
    }
    if let Ok(r) = Request::decode(data) {
        match &r {
            Request::Search { params } => assert_eq!(params.scope, Some(Scope::Local)),
            Request::Answer { hits, .. } => assert!(hits.len() <= MAX_REMOTE_HITS),
        }
        assert_eq!(Request::decode(&ask::encode(&r)).ok(), Some(r));
    }
    if let Ok(r) = Response::decode(data) {
        if let Response::Hits { hits } = &r {
            assert!(hits.len() <= MAX_REMOTE_HITS);
        }
        assert_eq!(Response::decode(&ask::encode(&r)).ok(), Some(r));
    }
    if let Ok(p) = serde_json::from_slice::<SearchParams>(data)
        && let Ok(q) = p.compile()
    {
        assert!((1..=MAX_LIMIT).contains(&q.limit));
        assert!(q.text.len() <= MAX_QUERY_BYTES);
    }
});
