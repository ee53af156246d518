//! `learning_execution`: arbitrary bytes as the params of the six `learning.*` methods
//! (`agora_hyperspace::learning::params`), and every execution that parses reflected into a
//! small playbook, in each training mode, and the playbook curated.
//!
//! Properties checked: nothing panics; accepted params stay within the limits; a reflection
//! never grows the playbook past its bound; `eval-only` changes nothing; curation meets its
//! token budget.
#![no_main]

use agora_hyperspace::learning::params::{
    AddBulletParams, CurateParams, FeedbackParams, LearningLimits, PlaybookParams, ReflectParams,
    valid_bullet_id, valid_playbook_id,
};
use agora_hyperspace::learning::reflect::{self, Mode};
use agora_hyperspace::learning::{Playbook, PlaybookLimits};
use libfuzzer_sys::fuzz_target;

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

fuzz_target!(|data: &[u8]| {
    let Ok(params) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let limits = LearningLimits::default();
    if let Ok(p) = PlaybookParams::parse(&params) {
        assert!(valid_playbook_id(&p.playbook_id));
    }
    if let Ok(p) = CurateParams::parse(&params, &limits) {
        assert!((1..=limits.max_tokens).contains(&p.max_tokens));
    }
    if let Ok(p) = AddBulletParams::parse(&params, &limits) {
        assert!(!p.content.trim().is_empty() && p.content.len() <= limits.max_content_bytes);
    }
    if let Ok(p) = FeedbackParams::parse(&params) {
        assert!(valid_bullet_id(&p.bullet_id));
    }
    let Ok(p) = ReflectParams::parse(&params, &limits) else {
        return;
    };
    assert!(p.execution.steps.len() <= limits.max_steps);
    assert!((-1.0..=1.0).contains(&p.execution.reward));
    let book_limits = PlaybookLimits {
        max_bullets: 3,
        ..PlaybookLimits::default()
    };
    let mut book = Playbook::new("fuzz", 1);
    for (i, mode) in [Mode::Online, Mode::Offline, Mode::Online, Mode::EvalOnly]
        .into_iter()
        .enumerate()
    {
        let before = book.clone();
        let candidates = reflect::propose(&book, &p.execution);
        let r = reflect::apply(
            &mut book,
            &p.execution,
            candidates,
            mode,
            10 + i as u64,
            &words,
            &book_limits,
        );
        assert!(book.entries.len() <= book_limits.max_bullets);
        if mode == Mode::EvalOnly {
            assert_eq!(book, before);
            assert_eq!(r.playbook_version, before.version);
        }
    }
    book.curate(5, 100);
    assert!(book.token_count() <= 5);
});
