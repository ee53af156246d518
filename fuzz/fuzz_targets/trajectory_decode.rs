//! `trajectory_decode`: arbitrary bytes as what the Self-Improving primitive reads from outside
//! (`agora_hyperspace::improving`): the `d` of a trajectory envelope (`gossip::decode_shared`,
//! signed by the `peerId` it names, on the topic of the `taskType` it names), the params of
//! `recordTrajectory` and the other five methods, and the `d` of a reputation view.
//!
//! Properties checked: nothing panics; a refused trajectory is −32008 naming a field; an
//! accepted one passes the recorded trajectory's checks, survives redaction, and its redacted
//! form decodes again; accepted params stay within their bounds; a library that admits it keeps
//! its bound and answers exemplars, curation, stats and difficulty.
#![no_main]

use agora_hyperspace::improving::gossip::{self, ReputationView};
use agora_hyperspace::improving::library::{self, Held};
use agora_hyperspace::improving::params::{
    AugmentParams, CurateParams, DifficultyParams, ExemplarParams, MAX_EXEMPLARS, StatsParams,
};
use agora_hyperspace::improving::{
    Library, RecordParams, Reputation, Strategy, TrajectoryLimits,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let limits = TrajectoryLimits::default();
    let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let from = value["peerId"].as_str().unwrap_or_default().to_owned();
    let task = value["taskType"].as_str().unwrap_or_default().to_owned();
    match gossip::decode_shared(text, &from, &task, &limits) {
        Err(e) => {
            assert_eq!(e.code.0, -32008);
            assert!(e.data.as_ref().is_some_and(|d| d["field"].is_string()));
        }
        Ok(t) => {
            assert!(t.check_received(&limits).is_ok());
            let (clean, _) = gossip::redacted(&t);
            let d = serde_json::to_string(&clean).expect("serializes");
            // Redaction never makes a trajectory unreadable (it may make it longer).
            if d.len() <= limits.max_bytes {
                gossip::decode_shared(&d, &from, &task, &limits).expect("redacted decodes");
            }
            let rep = Reputation::new(4);
            let mut lib = Library::new(2);
            lib.admit(Held::new(t.clone(), 1), Some(0.0), &rep);
            lib.admit(Held::new(clean, 2), None, &rep);
            assert!(lib.items.len() <= 2);
            let picked = lib.exemplars(3, Strategy::Hybrid, -1.0, &rep);
            assert!(picked.len() <= 2);
            let _ = lib.stats(&rep);
            let _ = lib.critique(&t.trajectory_id);
            let _ = library::difficulty(Some(&lib), &t.input, None);
            lib.curate(Strategy::Hybrid, &rep);
        }
    }
    if let Ok(p) = RecordParams::parse(&value, &limits) {
        assert!(p.steps.len() <= limits.max_steps);
        assert!(p.reward.is_none_or(|r| (-1.0..=1.0).contains(&r)));
    }
    if let Ok(p) = ExemplarParams::parse(&value) {
        assert!((1..=MAX_EXEMPLARS).contains(&p.limit));
    }
    let _ = CurateParams::parse(&value);
    let _ = AugmentParams::parse(&value);
    if let Ok(p) = DifficultyParams::parse(&value) {
        let _ = library::difficulty(None, &p.input, p.samples.as_deref());
    }
    let _ = StatsParams::parse(&value);
    if let Ok(v) = ReputationView::decode(text, &from) {
        assert!(v.contributors.iter().all(|c| c.successes <= c.uses));
    }
});
