//! Line-oriented input from a file or standard input (`-` or absent), and progress shown on
//! stderr for long commands when it is a terminal.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

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

/// The line-filter commands' common shape: reads `path` (or standard input) line by line, calls
/// `f(line_number, line, out)` which appends the output for that line to `out` and says whether
/// the line was fine, writes the outputs to standard output in order, and exits 0 when every
/// line was fine, 1 otherwise.
pub(crate) fn map_lines(
    path: Option<&PathBuf>,
    mut f: impl FnMut(u64, &[u8], &mut Vec<u8>) -> io::Result<bool>,
) -> io::Result<ExitCode> {
    let mut reader =
        open(path).map_err(|e| io::Error::new(e.kind(), format!("cannot read input: {e}")))?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut buf = Vec::with_capacity(256);
    let mut failed = false;
    for_each_line(&mut *reader, |n, line| {
        buf.clear();
        failed |= !f(n, line, &mut buf)?;
        out.write_all(&buf)
    })?;
    out.flush()?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A spinner on stderr for a long step, shown only when stderr is a terminal (hidden, and
/// free, in a pipe or a file).
pub(crate) fn spinner() -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    if !io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A byte-count progress bar over `path` on stderr, shown only when stderr is a terminal and
/// the input is a regular file (`None` otherwise).
pub(crate) fn file_progress(path: Option<&PathBuf>) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal as _;
    if !io::stderr().is_terminal() {
        return None;
    }
    let len = std::fs::metadata(path?).ok().filter(|m| m.is_file())?.len();
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style);
    }
    Some(bar)
}
