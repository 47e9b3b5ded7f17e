//! Text from outside (files, the kernel, other programs) made safe to print.

/// `s` with every non-printable character escaped (`\n`, `\t`, `\u{1b}`, bidi controls, …)
/// so names read from files or the kernel cannot move the cursor, recolour the terminal or
/// reorder the line. Backslashes are doubled so the result is unambiguous.
#[must_use]
pub fn safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if c.is_control() || is_invisible_format(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Unicode format characters that change how text around them is shown: zero-width ones,
/// bidi marks (U+061C too), embeddings, overrides and isolates, the byte order mark. The
/// fuzz targets check names printed through [`safe`] against this set.
#[must_use]
pub const fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{ad}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_escapes_what_a_terminal_would_obey() {
        let cases = [
            ("ubuntu", "ubuntu"),
            ("whereami-564765b89-qfq2k", "whereami-564765b89-qfq2k"),
            ("evil\u{1b}[2Jpod", "evil\\u{1b}[2Jpod"),
            ("a\nb\tc\r", "a\\nb\\tc\\r"),
            ("rtl\u{202e}gpj.exe", "rtl\\u{202e}gpj.exe"),
            ("alm\u{61c}x", "alm\\u{61c}x"),
            ("zero\u{200b}width", "zero\\u{200b}width"),
            ("back\\slash", "back\\\\slash"),
            ("\u{7f}\u{9b}", "\\u{7f}\\u{9b}"),
            ("café ü", "café ü"),
            ("", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(safe(raw), want, "{raw:?}");
        }
    }
}
