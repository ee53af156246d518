//! MiniLM against the reference vectors of `tests/vectors/memory/minilm.json` (computed with
//! Python's sentence-transformers on PyTorch, see the file's `description` and `generator`).
//!
//! Needs the installed model: `AGORA_MINILM_DIR` names its directory (`agora memory
//! install-model --data DIR` puts it in `DIR/models/all-minilm-l6-v2`). Without it the model
//! tests print one `skipped: …` line and pass, unless `AGORA_REQUIRE_EXTERNAL=1` (as `.ci/run`
//! sets), which makes that a failure.

#![cfg(feature = "minilm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use agora_embed::{EmbedError, Embedder, MiniLm, Threads, cosine};
use serde_json::Value;

fn vectors() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/memory/minilm.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The model directory, or `None` (and one `skipped:` line) when there is none.
fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("AGORA_MINILM_DIR").map(PathBuf::from);
    let why = match &dir {
        Some(d) if d.join("model.safetensors").is_file() => return dir,
        Some(d) => format!(
            "AGORA_MINILM_DIR={} holds no model.safetensors",
            d.display()
        ),
        None => "AGORA_MINILM_DIR is not set".to_owned(),
    };
    common::skip(
        &why,
        "agora memory install-model --data DIR, then AGORA_MINILM_DIR=DIR/models/all-minilm-l6-v2",
    );
    None
}

fn vec_of(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[test]
fn matches_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let model = MiniLm::load(&dir).unwrap();
    assert_eq!((model.id(), model.dim()), ("minilm-l6-v2", 384));
    let file = vectors();
    let sentences = file["sentences"].as_array().unwrap();
    let texts: Vec<&str> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    let expected: Vec<Vec<f32>> = sentences.iter().map(|s| vec_of(&s["vector"])).collect();

    // all at once: passes of several texts, padded to their longest
    let got = model.embed(&texts).unwrap();
    assert_eq!(got.len(), texts.len());
    let mut worst = f32::INFINITY;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g.len(), 384);
        assert!((norm(g) - 1.0).abs() < 1e-4, "text {i}: norm {}", norm(g));
        let c = cosine(g, e) / norm(e);
        assert!(
            c >= 0.999,
            "text {i} ({:?}): cosine {c} with the reference",
            texts[i]
        );
        worst = worst.min(c);
        let tokens = sentences[i]["tokens"].as_u64().unwrap() as usize;
        assert_eq!(model.token_count(texts[i]).unwrap(), tokens, "text {i}");
    }
    // the long text is cut at 256 tokens, not at the tokenizer file's 128
    assert!(
        sentences
            .iter()
            .any(|s| s["untruncated"].as_u64() > Some(256))
    );
    assert!(
        sentences
            .iter()
            .any(|s| (129..=256).contains(&s["tokens"].as_u64().unwrap()))
    );

    println!("lowest cosine with the reference: {worst}");
    // the published similarities (sentence-transformers documentation)
    for (a, b, published) in [(0, 1, 0.6660), (0, 2, 0.1046), (1, 2, 0.1411)] {
        let s = cosine(&got[a], &got[b]);
        println!("similarity {a}-{b}: {s:.6} (published {published})");
        assert!(
            (f64::from(s) - published).abs() <= 0.001,
            "similarity of {a} and {b}: {s}, published {published}"
        );
    }

    // one text at a time, on one thread: the same vectors as in a batch
    let one = MiniLm::load(&dir).unwrap().with_threads(Threads::One);
    for (i, t) in texts.iter().enumerate() {
        let v = one.embed(&[t]).unwrap().remove(0);
        assert!(
            cosine(&v, &got[i]) > 0.99999,
            "text {i} alone vs in a batch"
        );
    }

    // several callers at once share one model
    let one = &one;
    let got = &got;
    std::thread::scope(|s| {
        for k in 0..3 {
            let texts = &texts;
            s.spawn(move || {
                for round in 0..2 {
                    let i = (k + round) % texts.len();
                    let v = one.embed(&[texts[i], texts[0]]).unwrap();
                    assert!(cosine(&v[0], &got[i]) > 0.99999);
                    assert!(cosine(&v[1], &got[0]) > 0.99999);
                }
            });
        }
    });

    assert!(matches!(
        model.embed(&["fine", "  "]),
        Err(EmbedError::EmptyInput { index: 1 })
    ));
    assert!(model.embed(&[]).unwrap().is_empty());
}

#[test]
fn missing_or_foreign_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    match MiniLm::load(tmp.path()) {
        Err(EmbedError::MissingFile { path }) => assert!(path.ends_with("config.json")),
        other => panic!("{other:?}"),
    }
    // another model's config (here: BERT-base's hidden size) is not all-MiniLM-L6-v2
    std::fs::write(tmp.path().join("config.json"), br#"{"hidden_size": 768}"#).unwrap();
    match MiniLm::load(tmp.path()) {
        Err(EmbedError::BadModel(why)) => assert!(why.contains("SHA-256"), "{why}"),
        other => panic!("{other:?}"),
    }
}
