//! Line-oriented input from a file or standard input (`-` or absent).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;

/// Opens `path` (or standard input for `None` / `-`) for buffered line reading.
pub(crate) fn open(path: Option<&PathBuf>) -> io::Result<Box<dyn BufRead>> {
    const BUF: usize = 1 << 16;
    match path {
        Some(p) if p.as_os_str() != "-" => {
            Ok(Box::new(BufReader::with_capacity(BUF, File::open(p)?)))
        }
        _ => Ok(Box::new(BufReader::with_capacity(BUF, io::stdin()))),
    }
}

/// Calls `f(line_number, line)` for every line (1-based), without the line ending (`\n` or
/// `\r\n`). A final line without a newline counts; the empty string after a final newline does not.
pub(crate) fn for_each_line<R: BufRead + ?Sized>(
    reader: &mut R,
    mut f: impl FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut n = 0u64;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        n += 1;
        let mut line = buf.as_slice();
        if let Some(l) = line.strip_suffix(b"\n") {
            line = l;
        }
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        f(n, line)?;
    }
}
