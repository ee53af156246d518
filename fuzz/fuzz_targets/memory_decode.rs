//! `memory_decode`: arbitrary bytes as a node-to-node memory request and response
//! (`agora_hyperspace::memory::wire`) and, when they are JSON, as the params of the six
//! `memory.*` methods.
//!
//! Properties checked: nothing panics; a request or response that decodes re-encodes to bytes
//! that decode to an equal value; accepted params stay within the limits.
#![no_main]

use agora_hyperspace::memory::params::{
    IdParams, ListParams, MemoryLimits, SearchParams, StoreParams,
};
use agora_hyperspace::memory::wire::{MemoryRequest, MemoryResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = MemoryLimits::default();
    if let Ok(req) = MemoryRequest::decode(data, &limits) {
        let again = MemoryRequest::decode(&req.encode(), &limits).expect("re-encoded request decodes");
        assert_eq!(again, req);
    }
    if let Ok(res) = MemoryResponse::decode(data, &limits) {
        let again =
            MemoryResponse::decode(&res.encode(), &limits).expect("re-encoded response decodes");
        assert_eq!(again, res);
    }
    let Ok(params) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(p) = StoreParams::parse(&params, &limits) {
        assert!(!p.content.trim().is_empty() && p.content.len() <= limits.max_content_bytes);
    }
    if let Ok(p) = SearchParams::parse(&params, &limits) {
        assert!((1..=limits.max_search_limit).contains(&p.limit));
        assert!((0.0..=1.0).contains(&p.threshold));
    }
    if let Ok(p) = ListParams::parse(&params, &limits) {
        assert!(p.limit <= limits.max_list_limit && p.offset <= limits.max_list_offset);
    }
    if let Ok(p) = IdParams::parse(&params, &limits) {
        assert!(agora_hyperspace::memory::record::valid_memory_id(&p.id));
    }
});
