//! Lowercase hexadecimal encoding (digests and route tokens).

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends the lowercase hex form of `bytes` to `out`.
pub(crate) fn push_lower(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_lowercase() {
        let mut s = String::new();
        super::push_lower(&mut s, &[0x00, 0x7f, 0xab, 0xff]);
        assert_eq!(s, "007fabff");
    }
}
