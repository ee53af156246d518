//! The lexical embedder against its pinned outputs (`tests/vectors/memory/lexical.json`,
//! computed by a separate implementation of the recipe): a change of recipe fails here and
//! needs a new id.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use agora_embed::{Embedder, Lexical};
use serde_json::Value;

#[test]
fn pinned_outputs() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/memory/lexical.json");
    let file: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let e = Lexical::new();
    assert_eq!(file["id"], e.id());
    assert_eq!(file["dim"].as_u64(), Some(e.dim() as u64));
    let cases = file["texts"].as_array().unwrap();
    assert!(cases.len() >= 5);
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let got = e.embed(&texts).unwrap();
    for (case, v) in cases.iter().zip(&got) {
        let want: Vec<f64> = case["vector"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), want.len());
        for (i, (a, b)) in v.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(*a) - b).abs() < 1e-6,
                "{:?}: component {i} is {a}, pinned {b}",
                case["text"]
            );
        }
    }
}
