//! `agtp_codec`: arbitrary bytes as an AGTP/1.0 request and as a response.
//!
//! Properties checked: nothing panics; a decoded message uses at most the input, every shorter
//! prefix of it needs more bytes, and it re-encodes to bytes that decode to the same message; an
//! input whose first half is already an error stays an error; a parsed Authority-Scope list
//! displays to text that parses back to it.
#![no_main]

use agora_agtp::BadRequest;
use agora_agtp::codec::{Headers, Limits, decode_request, decode_response};
use agora_agtp::scope::Scopes;
use libfuzzer_sys::fuzz_target;

type Decode<M> = fn(&[u8], &Limits) -> Result<Option<(M, usize)>, BadRequest>;

fn check<M: PartialEq + std::fmt::Debug>(
    data: &[u8],
    limits: &Limits,
    decode: Decode<M>,
    encode: fn(&M) -> Vec<u8>,
    headers: fn(&M) -> &Headers,
) {
    let full = decode(data, limits);
    if decode(&data[..data.len() / 2], limits).is_err() {
        assert!(
            full.is_err(),
            "a prefix was an error but the whole input is {full:?}"
        );
    }
    let Ok(Some((message, used))) = full else {
        return;
    };
    assert!(used > 0 && used <= data.len());
    for k in [0, used / 2, used - 1] {
        assert_eq!(
            decode(&data[..k], limits),
            Ok(None),
            "prefix of {k} of {used} bytes"
        );
    }
    // Encoding may add a Content-Length line and CRs, so allow the head to grow.
    let roomy = Limits {
        max_head: limits.max_head * 2 + 64,
        ..*limits
    };
    let again = encode(&message);
    assert_eq!(decode(&again, &roomy), Ok(Some((message, again.len()))));
    let Ok(Some((message, _))) = decode(data, limits) else {
        unreachable!("decoded above");
    };
    if let Ok(Some(scopes)) = headers(&message).authority_scope() {
        let text = scopes.to_string();
        assert_eq!(text.parse::<Scopes>().as_ref(), Ok(&scopes), "{text}");
    }
}

fuzz_target!(|data: &[u8]| {
    for limits in [
        Limits::default(),
        Limits {
            max_head: 96,
            max_body: 32,
        },
    ] {
        check(
            data,
            &limits,
            decode_request,
            |r| r.encode(),
            |r| &r.headers,
        );
        check(
            data,
            &limits,
            decode_response,
            |r| r.encode(),
            |r| &r.headers,
        );
    }
    if let Ok(Some((request, _))) = decode_request(data, &Limits::default()) {
        let _ = request.json_body();
        let _ = (
            request.path(),
            request.query(),
            request.headers.principal_id(),
        );
    }
    if let Ok(Some((response, _))) = decode_response(data, &Limits::default()) {
        let _ = response.json_body();
    }
});
