//! Node-name globs for `ignore-nodes` and `--node`. Hand-written rather than `globset`: node names
//! are not paths (`*` must cross `/`), and the two wildcards need a dozen lines.

/// `*` matches any run of characters (`/` included), `?` exactly one character.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("/features/*", "/features/features.0/Conv"));
        assert!(glob_match("*Conv", "/a/b/Conv"));
        assert!(glob_match("/a/?/Conv", "/a/b/Conv"));
        assert!(!glob_match("/a/?/Conv", "/a/bc/Conv"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }
}
