//! Glob patterns as Redis matches them (SCAN MATCH), also used for `--only`.

/// Redis' glob: `*`, `?`, `[abc]`, `[a-z]`, `[^a]` and `\` escapes.
pub fn glob_match(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') => (0..=s.len()).any(|i| glob_match(&p[1..], &s[i..])),
        Some(b'?') => !s.is_empty() && glob_match(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(&c) = s.first() else { return false };
            let mut i = 1;
            let negate = p.get(1) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut matched = false;
            while i < p.len() && p[i] != b']' {
                if p[i] == b'\\' && i + 1 < p.len() {
                    matched |= p[i + 1] == c;
                    i += 2;
                } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
                    let (lo, hi) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
                    matched |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    matched |= p[i] == c;
                    i += 1;
                }
            }
            let rest = if i < p.len() { &p[i + 1..] } else { &p[i..] };
            matched != negate && glob_match(rest, &s[1..])
        }
        Some(b'\\') if p.len() > 1 => s.first() == Some(&p[1]) && glob_match(&p[2..], &s[1..]),
        Some(&c) => s.first() == Some(&c) && glob_match(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"user:*", b"user:42"));
        assert!(!glob_match(b"user:*", b"users"));
        assert!(glob_match(b"k?y", b"key"));
        assert!(glob_match(b"[a-c]x", b"bx"));
        assert!(!glob_match(b"[^a-c]x", b"bx"));
        assert!(glob_match(b"a\\*", b"a*"));
    }
}
