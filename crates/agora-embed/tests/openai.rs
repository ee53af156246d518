//! The `openai` embedder against a real HTTP server on 127.0.0.1: the fixture
//! `tests/fixtures/openai_server.py` (Python's standard library `http.server`, another HTTP
//! stack than ours) speaking the OpenAI embeddings shape. It needs `python3`; without it each
//! test prints one `skipped: …` line and passes, unless `AGORA_REQUIRE_EXTERNAL=1` (as `.ci/run`
//! sets), which makes that a failure.

#![cfg(feature = "openai")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agora_embed::{EmbedError, Embedder, OpenAi, OpenAiConfig, cosine};

/// The fixture server, killed on drop.
struct Fixture {
    child: Child,
    port: u16,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixture(args: &[&str]) -> Option<Fixture> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/openai_server.py"
    );
    let child = Command::new("python3")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            common::skip(
                &format!("python3 could not start ({e})"),
                "apt-get install python3",
            );
            return None;
        }
    };
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let port = first
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("fixture said {first:?}"));
    Some(Fixture { child, port })
}

fn config(port: u16, model: &str, key: Option<&str>) -> OpenAiConfig {
    OpenAiConfig {
        base_url: format!("http://127.0.0.1:{port}/v1/"),
        model: model.to_owned(),
        api_key: key.map(str::to_owned),
        timeout: Duration::from_secs(5),
    }
}

#[test]
fn vectors_come_back_normalised_in_input_order() {
    let Some(f) = fixture(&["--dim", "96"]) else {
        return;
    };
    let e = OpenAi::connect(config(f.port, "hash-embed", None)).unwrap();
    assert_eq!(e.id(), "openai:hash-embed");
    assert_eq!(e.dim(), 96);
    let texts = [
        "apple pie with cinnamon",
        "quantum field theory lecture",
        "cinnamon apple crumble",
    ];
    let batch = e.embed(&texts).unwrap();
    assert_eq!(batch.len(), 3);
    for (text, v) in texts.iter().zip(&batch) {
        assert_eq!(v.len(), 96);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "unit length: {norm}");
        // The server answered the batch in reverse; each vector is still its own text's.
        let single = e.embed(&[text]).unwrap();
        assert!(cosine(v, &single[0]) > 0.99999, "{text}");
    }
    assert!(cosine(&batch[0], &batch[2]) > cosine(&batch[0], &batch[1]));
    assert!(matches!(
        e.embed(&["  "]),
        Err(EmbedError::EmptyInput { index: 0 })
    ));
}

#[test]
fn keys_are_sent_and_server_errors_are_reported() {
    let Some(f) = fixture(&["--key", "s3cret"]) else {
        return;
    };
    let no_key = OpenAi::connect(config(f.port, "hash-embed", None)).unwrap_err();
    assert!(
        no_key.to_string().contains("HTTP 401: invalid api key"),
        "{no_key}"
    );
    let e = OpenAi::connect(config(f.port, "hash-embed", Some("s3cret"))).unwrap();
    assert!(
        !format!("{e:?}").contains("s3cret"),
        "the key is not printed"
    );
    let unknown = OpenAi::connect(config(f.port, "nope", Some("s3cret"))).unwrap_err();
    assert!(
        unknown
            .to_string()
            .contains("HTTP 404: model 'nope' not found"),
        "{unknown}"
    );
    let short = OpenAi::connect(config(f.port, "short", Some("s3cret"))).unwrap_err();
    assert!(
        short.to_string().contains("0 vectors for 1 texts"),
        "{short}"
    );
}

#[test]
fn a_hung_endpoint_costs_one_deadline() {
    let Some(f) = fixture(&[]) else {
        return;
    };
    let started = Instant::now();
    let mut c = config(f.port, "slow", None);
    c.timeout = Duration::from_millis(500);
    let err = OpenAi::connect(c).unwrap_err();
    assert!(matches!(err, EmbedError::Remote(_)), "{err}");
    // One 500 ms deadline: measured 516-532 ms (three runs, 2026-11-29, 2 cores shared). 10 s
    // leaves room for a loaded runner and still fails a client that waits for the fixture's
    // slow model (it answers after 30 s) or retries the deadline many times over.
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    // Nothing listens here any more once the fixture is gone.
    let port = f.port;
    drop(f);
    let gone = OpenAi::connect(config(port, "hash-embed", None)).unwrap_err();
    assert!(matches!(gone, EmbedError::Remote(_)), "{gone}");
    let bad = OpenAi::connect(OpenAiConfig {
        base_url: "ftp://127.0.0.1/v1".into(),
        ..config(port, "hash-embed", None)
    })
    .unwrap_err();
    assert!(bad.to_string().contains("not an http"), "{bad}");
}
