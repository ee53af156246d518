//! Helpers shared by the fuzz targets.

/// At most `max` bytes of `s` (on a char boundary), for readable panic messages.
pub fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
