//! Valgrind lackey's `--trace-mem=yes` output, read as a stream so a recording never needs the text
//! stored: `I  addr,size` (instruction fetch), ` L addr,size` (load), ` S addr,size` (store),
//! ` M addr,size` (modify: load and store, one write reference). Addresses are hex; an access that
//! crosses a page boundary references every page it covers. Lines valgrind itself prints
//! (`==pid== ...`) are skipped.

use super::{Trace, TraceBuilder, TraceError};

/// The largest size a record may give. A record is one instruction's memory effect: an operand
/// of at most 64 bytes, or a state save such as XSAVE's area of a few KiB (Intel SDM vol. 1, 13.4);
/// 1 MiB is generous, and keeps a corrupt size from filling memory with page references.
const MAX_ACCESS: u64 = 1 << 20;

/// A streaming lackey parser.
#[derive(Debug)]
pub struct LackeyReader {
    builder: TraceBuilder,
    partial: Vec<u8>,
    line: u64,
    instructions: bool,
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = v << 4 | d as u64;
    }
    Some(v)
}

fn parse_dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |v, &c| v * 10 + (c - b'0') as u64))
}

impl LackeyReader {
    /// A reader; `instructions` keeps instruction fetches as read references.
    pub fn new(instructions: bool) -> Self {
        Self { builder: TraceBuilder::new(), partial: Vec::new(), line: 0, instructions }
    }

    /// References read so far.
    pub fn references(&self) -> usize {
        self.builder.len()
    }

    /// Feeds the next chunk of output (lines may be split across chunks).
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), TraceError> {
        let mut rest = chunk;
        if !self.partial.is_empty() {
            match rest.iter().position(|&c| c == b'\n') {
                Some(i) => {
                    let mut line = std::mem::take(&mut self.partial);
                    line.extend_from_slice(&rest[..i]);
                    self.line(&line)?;
                    rest = &rest[i + 1..];
                }
                None => {
                    self.partial.extend_from_slice(rest);
                    return Ok(());
                }
            }
        }
        while let Some(i) = rest.iter().position(|&c| c == b'\n') {
            self.line(&rest[..i])?;
            rest = &rest[i + 1..];
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the stream; a final line without a newline is parsed too.
    pub fn finish(mut self) -> Result<Trace, TraceError> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line)?;
        }
        Ok(self.builder.finish())
    }

    fn line(&mut self, raw: &[u8]) -> Result<(), TraceError> {
        self.line += 1;
        let l = raw.strip_suffix(b"\r").unwrap_or(raw);
        if l.is_empty() || l.starts_with(b"==") || l.starts_with(b"--") {
            return Ok(());
        }
        let bad = |why: &str| {
            // A line as the error shows it: 60 characters at most, control bytes escaped (a binary
            // file fed as lackey output would otherwise fill or disturb the terminal).
            let line = String::from_utf8_lossy(l);
            let text: String = line.chars().take(60).flat_map(char::escape_debug).collect();
            let more = if line.chars().nth(60).is_some() { "..." } else { "" };
            TraceError::at_line(self.line, format!("{why}: '{text}{more}' is not a lackey record (I/L/S/M addr,size)"))
        };
        let (kind, body) = match l {
            [b'I', b' ', b' ', body @ ..] => (b'I', body),
            [b' ', k @ (b'L' | b'S' | b'M'), b' ', body @ ..] => (*k, body),
            // A binary file (an executable, a compressed trace) is said to be one, not dumped; a
            // binary line after records is one in a trace (another program's output mixed in).
            _ if l.contains(&0) || std::str::from_utf8(l).is_err() => {
                let why = if self.references() == 0 {
                    "binary data, not text: not a lackey trace (valgrind --tool=lackey's text output)"
                } else {
                    "binary data among the records (lackey writes text: was another program's output mixed in?)"
                };
                return Err(TraceError::at_line(self.line, why));
            }
            _ => return Err(bad("unknown record")),
        };
        let comma = body.iter().position(|&c| c == b',').ok_or_else(|| bad("no size"))?;
        let addr = parse_hex(&body[..comma]).ok_or_else(|| bad("bad address"))?;
        let size = parse_dec(&body[comma + 1..]).filter(|&s| s > 0).ok_or_else(|| bad("bad size"))?;
        if size > MAX_ACCESS {
            return Err(bad("size larger than any one access (at most 1 MiB accepted)"));
        }
        if kind == b'I' && !self.instructions {
            return Ok(());
        }
        let write = matches!(kind, b'S' | b'M');
        let last = addr.checked_add(size - 1).ok_or_else(|| bad("access wraps the address space"))?;
        for page in addr >> 12..=last >> 12 {
            self.builder.push(page, write).map_err(|m| TraceError::at_line(self.line, m))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::WRITE;

    const SAMPLE: &str =
        "==42== Lackey, an example Valgrind tool\nI  04016cb0,3\n S 7ff000ff8,8\n L 04228da8,8\n M 04228db0,4\n L 00000ffe,4\n==42== \n";

    #[test]
    fn parses_records_and_page_crossings() {
        let mut r = LackeyReader::new(false);
        r.feed(SAMPLE.as_bytes()).unwrap();
        let t = r.finish().unwrap();
        // S 7ff000ff8 -> page 0x7ff000; L/M 04228d.. -> page 0x4228; L 0ffe,4 crosses pages 0 and 1.
        assert_eq!(t.original_pages(), &[0x7ff000, 0x4228, 0x0, 0x1]);
        assert_eq!(t.refs(), &[WRITE, 1, 1 | WRITE, 2, 3]);
    }

    #[test]
    fn instruction_fetches_are_optional_and_chunks_may_split_lines() {
        let mut r = LackeyReader::new(true);
        for chunk in SAMPLE.as_bytes().chunks(5) {
            r.feed(chunk).unwrap();
        }
        let t = r.finish().unwrap();
        assert_eq!(t.refs().len(), 6);
        assert_eq!(t.original_pages()[0], 0x4016);
    }

    #[test]
    fn malformed_lines_are_located() {
        let mut r = LackeyReader::new(false);
        let e = r.feed(b"I  04016cb0,3\n X 1234,4\n").unwrap_err();
        assert_eq!(e.at, "line 2");
        let mut r = LackeyReader::new(false);
        r.feed(b" L 1234\n").unwrap_err();
        let mut r = LackeyReader::new(false);
        assert!(r.feed(b" L zz12,4\n").unwrap_err().message.contains("bad address"));
        // A size no access has is refused before it becomes millions of page references.
        let mut r = LackeyReader::new(false);
        assert!(r.feed(b" L 0,1000000000000\n").unwrap_err().message.contains("larger than any one access"));
        assert!(LackeyReader::new(false).feed(b" L 0,1048576\n").is_ok(), "1 MiB is accepted");
        // A long or binary line is shown cut short, its control bytes escaped.
        let long = [b"X\x1b[2J".as_slice(), &[b'z'; 100_000], b"\n"].concat();
        let e = LackeyReader::new(false).feed(&long).unwrap_err().message;
        assert!(e.len() < 200 && e.contains("X\\u{1b}[2J") && e.contains("...'") && !e.contains('\x1b'), "{e}");
        let e = LackeyReader::new(false).feed(b"\x7fELF\x02\x01\x01\0\0\n").unwrap_err();
        assert!(e.at == "line 1" && e.message.starts_with("binary data, not text") && !e.message.contains("ELF"), "{}", e.message);
        let e = LackeyReader::new(false).feed(b"(\xb5/\xfd zstd\n").unwrap_err();
        assert!(e.message.starts_with("binary data"), "{}", e.message);
        let e = LackeyReader::new(false).feed(b" L 1234,4\n\xff\xfe\n").unwrap_err();
        assert!(e.at == "line 2" && e.message.starts_with("binary data among the records"), "{}", e.message);
    }
}
