//! libCacheSim's trace formats: `oracleGeneral` (binary, 24-byte packed records `u32 clock_time,
//! u64 obj_id, u32 obj_size, i64 next_access_vtime`, often zstd-compressed) and csv (one request
//! per line, the object id in a chosen column). Object ids become page numbers; these formats carry
//! no read/write distinction, so every reference is a read.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};

use super::{Trace, TraceBuilder, TraceError, is_zstd};
use crate::units::PAGE_SIZE;

const RECORD: usize = 24;

/// The decoded bytes of `bytes`, plain or zstd-compressed, as a stream: a trace is read record by
/// record, so only the trace itself is held, never its decompressed file (often tens of GB).
fn decoded(bytes: &[u8]) -> Result<Box<dyn Read + '_>, TraceError> {
    if is_zstd(bytes) {
        let d = zstd::stream::read::Decoder::with_buffer(bytes).map_err(|e| corrupt(&e))?;
        Ok(Box::new(d))
    } else {
        Ok(Box::new(bytes))
    }
}

fn corrupt(e: &std::io::Error) -> TraceError {
    TraceError::at_byte(0, format!("zstd-compressed input is corrupt or truncated: {e}"))
}

/// Reads an oracleGeneral trace (plain or zstd-compressed).
pub fn read_oracle_general(bytes: &[u8]) -> Result<Trace, TraceError> {
    let mut input = decoded(bytes)?;
    let mut b = TraceBuilder::new();
    let mut chunk = vec![0u8; RECORD * 4096];
    let (mut at, mut filled) = (0u64, 0usize);
    loop {
        let n = match input.read(&mut chunk[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(&e)),
        };
        filled += n;
        let whole = filled / RECORD * RECORD;
        for rec in chunk[..whole].chunks_exact(RECORD) {
            let obj = u64::from_le_bytes(rec[4..12].try_into().expect("8 bytes"));
            b.push(obj, false).map_err(|m| TraceError::at_byte(at, m))?;
            at += RECORD as u64;
        }
        chunk.copy_within(whole..filled, 0);
        filled -= whole;
        if n == 0 {
            break;
        }
    }
    if filled > 0 {
        return Err(TraceError::at_byte(
            at,
            format!("truncated record: oracleGeneral records are {RECORD} bytes and {filled} are left over"),
        ));
    }
    Ok(b.finish())
}

/// Writes a trace as oracleGeneral: object id = original page number, size = one page, clock =
/// request index, next access = index of the object's next request (-1 if none), as libCacheSim's
/// Belady implementation expects.
pub fn write_oracle_general(t: &Trace) -> Vec<u8> {
    let refs = t.refs();
    let mut next = vec![-1i64; refs.len()];
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for (i, &r) in refs.iter().enumerate().rev() {
        let id = r & super::ID_MASK;
        if let Some(&j) = seen.get(&id) {
            next[i] = j as i64;
        }
        seen.insert(id, i);
    }
    let mut out = Vec::with_capacity(refs.len() * RECORD);
    for (i, &r) in refs.iter().enumerate() {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&t.original_pages()[(r & super::ID_MASK) as usize].to_le_bytes());
        out.extend_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        out.extend_from_slice(&next[i].to_le_bytes());
    }
    out
}

/// Writes a trace as oracleGeneral in one zstd frame, as libCacheSim's `.oracleGeneral.zst` traces
/// come (at the native format's level).
pub fn write_oracle_general_zst(t: &Trace) -> Vec<u8> {
    zstd::stream::encode_all(&write_oracle_general(t)[..], super::native::LEVEL).expect("zstd into memory")
}

/// How to read a csv trace (libCacheSim's `obj-id-col`, `delimiter`, `has-header`).
#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// 1-based column of the object id.
    pub obj_id_col: usize,
    /// Field separator.
    pub delimiter: u8,
    /// Whether the first line is a header; `None` detects it (a non-numeric id field).
    pub has_header: Option<bool>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self { obj_id_col: 2, delimiter: b',', has_header: None }
    }
}

fn parse_id(s: &str) -> Option<u64> {
    let s = s.trim().trim_matches('"');
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Whether a field begins as a number would: a digit, a sign or a decimal point.
fn starts_like_a_number(field: &str) -> bool {
    field.trim().trim_matches('"').starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.'))
}

/// Reads a csv trace (plain or zstd-compressed).
pub fn read_csv(bytes: &[u8], opt: &CsvOptions) -> Result<Trace, TraceError> {
    if opt.obj_id_col == 0 {
        return Err(TraceError::at_line(0, "obj_id_col is 1-based"));
    }
    let mut input = BufReader::new(decoded(bytes)?);
    let mut b = TraceBuilder::new();
    let (mut raw, mut offset, mut n) = (Vec::new(), 0u64, 0u64);
    loop {
        raw.clear();
        if input.read_until(b'\n', &mut raw).map_err(|e| corrupt(&e))? == 0 {
            break;
        }
        n += 1;
        let line = std::str::from_utf8(&raw).map_err(|e| TraceError::at_byte(offset + e.valid_up_to() as u64, "not UTF-8 text"))?;
        offset += raw.len() as u64;
        // A byte-order mark some tools put first is not part of the first field.
        let line = if n == 1 { line.strip_prefix('\u{feff}').unwrap_or(line) } else { line };
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        if n == 1 && opt.has_header == Some(true) {
            continue;
        }
        let field = line.split(opt.delimiter as char).nth(opt.obj_id_col - 1);
        let Some(field) = field else {
            return Err(TraceError::at_line(n, format!("has no column {} (delimiter '{}')", opt.obj_id_col, opt.delimiter as char)));
        };
        match parse_id(field) {
            Some(id) => b.push(id, false).map_err(|m| TraceError::at_line(n, m))?,
            // A header names its columns; a first field that starts like a number (`-5`, `5.0`)
            // is a bad id, not a header to skip in silence.
            None if n == 1 && opt.has_header.is_none() && !starts_like_a_number(field) => continue,
            None => {
                return Err(TraceError::at_line(
                    n,
                    format!(
                        "object id '{field}' in column {} is not a whole number from 0 to {} (decimal, or hex with 0x)",
                        opt.obj_id_col,
                        u64::MAX
                    ),
                ));
            }
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trace {
        let mut b = TraceBuilder::new();
        for p in [5u64, 9, 5, 5, 1 << 40] {
            b.push(p, false).unwrap();
        }
        b.finish()
    }

    #[test]
    fn oracle_general_round_trip_with_next_access() {
        let t = sample();
        let bytes = write_oracle_general(&t);
        assert_eq!(bytes.len(), 5 * RECORD);
        let next: Vec<i64> = bytes.chunks(RECORD).map(|r| i64::from_le_bytes(r[16..24].try_into().unwrap())).collect();
        assert_eq!(next, vec![2, -1, 3, -1, -1]);
        assert_eq!(read_oracle_general(&bytes).unwrap(), t);
        let z = zstd::stream::encode_all(&bytes[..], 3).unwrap();
        assert_eq!(read_oracle_general(&z).unwrap(), t);
    }

    #[test]
    fn truncated_oracle_general_names_the_offset() {
        let bytes = write_oracle_general(&sample());
        let e = read_oracle_general(&bytes[..50]).unwrap_err();
        assert_eq!(e.at, "byte 48");
        // A compressed file cut short is refused, not read as the records it still holds.
        let z = zstd::stream::encode_all(&bytes[..], 3).unwrap();
        let e = read_oracle_general(&z[..z.len() - 4]).unwrap_err();
        assert!(e.message.contains("corrupt or truncated"), "{e}");
        let z = zstd::stream::encode_all(&b"1,5\n2,9\n"[..], 3).unwrap();
        assert!(read_csv(&z[..z.len() - 2], &CsvOptions::default()).unwrap_err().message.contains("corrupt or truncated"));
    }

    #[test]
    fn a_trace_larger_than_one_read_is_read_whole() {
        // Records straddle the reader's chunks: every one must come through.
        let mut b = TraceBuilder::new();
        for i in 0..20_000u64 {
            b.push(i * 7919 % 5_003, false).unwrap();
        }
        let t = b.finish();
        let bytes = write_oracle_general(&t);
        assert_eq!(read_oracle_general(&zstd::stream::encode_all(&bytes[..], 3).unwrap()).unwrap(), t);
        let z = write_oracle_general_zst(&t);
        assert!(super::is_zstd(&z) && z.len() < bytes.len());
        assert_eq!(zstd::stream::decode_all(&z[..]).unwrap(), bytes);
        let csv: String = t.refs().iter().enumerate().map(|(i, &r)| format!("{i},{}\r\n", t.original_pages()[r as usize])).collect();
        assert_eq!(read_csv(csv.as_bytes(), &CsvOptions::default()).unwrap(), t);
    }

    #[test]
    fn csv_with_header_and_errors() {
        let t = read_csv(b"time,obj,size\n1,5,4096\n2,0x9,4096\n3,5,4096\n", &CsvOptions::default()).unwrap();
        assert_eq!(t.original_pages(), &[5, 9]);
        assert_eq!(t.refs().len(), 3);
        let e = read_csv(b"1,5\n2,x\n", &CsvOptions::default()).unwrap_err();
        assert_eq!(e.at, "line 2");
        let e = read_csv(b"1;5\n", &CsvOptions::default()).unwrap_err();
        assert!(e.message.contains("no column 2"), "{e}");
        // A header said to be one is skipped even when its fields look like ids.
        let numbered = CsvOptions { has_header: Some(true), ..CsvOptions::default() };
        assert_eq!(read_csv(b"0,1,2\n1,5,4096\n", &numbered).unwrap().refs().len(), 1);
        assert_eq!(read_csv(b"0,1,2\n1,5,4096\n", &CsvOptions::default()).unwrap().refs().len(), 2);
        let first_col = CsvOptions { obj_id_col: 1, ..CsvOptions::default() };
        assert_eq!(read_csv("\u{feff}5\n9\n5\n".as_bytes(), &first_col).unwrap().refs().len(), 3, "a BOM is not a header");
        // A first line whose id starts like a number is a bad id, not a header dropped in silence.
        for first in ["1,-5\n2,3\n", "1,5.0\n2,3\n", "1,18446744073709551616\n2,3\n"] {
            let e = read_csv(first.as_bytes(), &CsvOptions::default()).unwrap_err();
            assert!(e.at == "line 1" && e.message.contains("is not a whole number from 0 to 18446744073709551615"), "{first}: {e}");
        }
    }
}
