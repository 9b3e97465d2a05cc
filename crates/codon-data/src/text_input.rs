//! What every reader of a text input checks first: a compressed file is named as such (rather
//! than failing later as "invalid UTF-8"), and a UTF-8 byte-order mark, which spreadsheet
//! programs and Windows editors write, is skipped.

use std::io::Read;
use std::path::Path;

use crate::error::{DataError, Result};

/// The UTF-8 byte-order mark.
pub const BOM: char = '\u{feff}';

/// The compressed formats told apart by their first bytes, and how to undo each.
const COMPRESSED: [(&[u8], &str, &str); 5] = [
    (&[0x1f, 0x8b], "gzip", "gunzip -k"),
    (&[0x28, 0xb5, 0x2f, 0xfd], "zstd", "zstd -d"),
    (b"BZh", "bzip2", "bunzip2 -k"),
    (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz", "unxz -k"),
    (b"PK\x03\x04", "zip", "unzip"),
];

/// An error naming the compression of `path` where its first bytes show one.
pub fn refuse_compressed(path: &Path) -> Result<()> {
    let mut head = [0u8; 6];
    let mut n = 0;
    let mut file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(DataError::io(path, e)),
        }
    }
    match COMPRESSED.iter().find(|(magic, _, _)| head[..n].starts_with(magic)) {
        Some((_, format, undo)) => Err(DataError::Compressed { path: path.to_path_buf(), format, undo }),
        None => Ok(()),
    }
}

/// `line` without the byte-order mark that may open a file's first line.
pub fn without_bom(line_no: usize, line: &str) -> &str {
    if line_no == 1 {
        line.strip_prefix(BOM).unwrap_or(line)
    } else {
        line
    }
}

/// The most characters of a name or header that a message repeats.
const SHOWN_CHARS: usize = 100;

/// `text` cut to what a message should repeat of it, saying how long it was.
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()).into(),
        None => text.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_files_are_named_and_text_is_not() {
        let dir = tempfile::tempdir().unwrap();
        for (bytes, format) in
            [(&b"\x1f\x8b\x08\x00rest"[..], "gzip"), (b"(\xb5/\xfd..", "zstd"), (b"PK\x03\x04..", "zip")]
        {
            let path = dir.path().join("genes.csv");
            std::fs::write(&path, bytes).unwrap();
            let err = refuse_compressed(&path).unwrap_err().to_string();
            assert!(err.contains(&format!("{format}-compressed")), "{err}");
        }
        for text in ["", "dna\nATG\n", "\u{feff}>x\nMK\n"] {
            let path = dir.path().join("plain.fasta");
            std::fs::write(&path, text).unwrap();
            refuse_compressed(&path).unwrap();
        }
    }

    #[test]
    fn long_text_is_cut_in_messages() {
        assert_eq!(shown("abc"), "abc");
        let long = "é".repeat(1000);
        assert_eq!(shown(&long), format!("{}… (2000 bytes)", "é".repeat(100)));
    }
}
