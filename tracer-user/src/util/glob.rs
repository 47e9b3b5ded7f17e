//! Interface name patterns: plain names or globs with `*` and `?` (`--iface`, `--uplink`).

/// True when `name` matches one of `patterns` (names or globs with `*` and `?`).
#[must_use]
pub fn iface_matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| glob_match(p, name))
}

/// True when `pattern` has glob characters (`*`, `?`), false for a plain interface name.
#[must_use]
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// Glob match over characters: `*` is any run (also empty), `?` one character.
#[must_use]
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was and which text position it is currently made to cover up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("azv*", "azv47c3ee9d512", true),
            ("azv*", "azv", true),
            ("azv*", "az", false),
            ("eth0", "eth0", true),
            ("eth0", "eth01", false),
            ("eth?", "eth1", true),
            ("eth?", "eth", false),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("*0", "azure0", true),
            ("**", "x", true),
            ("v?th*", "veth1234", true),
            ("cali*", "calié", true),
            ("é?", "éa", true),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(glob_match(pattern, name), want, "{pattern:?} vs {name:?}");
        }
        let defaults: Vec<String> = ["eth0", "azure0", "azv*"].map(String::from).to_vec();
        assert!(iface_matches(&defaults, "azure0"));
        assert!(iface_matches(&defaults, "azva4124965a9b"));
        assert!(!iface_matches(&defaults, "docker0"));
        assert!(!iface_matches(&[], "eth0"));
    }
}
