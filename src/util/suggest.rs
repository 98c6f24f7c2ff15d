//! "Did you mean" for unknown rule names, option keys, configuration keys and GPU names.

/// Appends "did you mean 'x'?" when a known name is close to the given one: a close spelling
/// (Jaro–Winkler above 0.8), or every word of the given name in a known one (`heavy-conv` for
/// `heavy-standard-conv`).
pub fn suggest(message: &str, given: &str, known: &[&str]) -> String {
    match closest(given, known) {
        Some(k) => format!("{message}: did you mean '{k}'?"),
        None => message.to_string(),
    }
}

/// The known name closest to `given`, if one is close enough.
pub fn closest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let words_in = |k: &str| {
        given
            .split(['-', '_'])
            .all(|w| !w.is_empty() && k.split('-').any(|x| x.eq_ignore_ascii_case(w)))
    };
    known
        .iter()
        .map(|k| {
            (
                strsim::jaro_winkler(given, k).max(if words_in(k) { 0.85 } else { 0.0 }),
                *k,
            )
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The key serde complains about in an "unknown field `x`" message.
pub fn unknown_key(msg: &str) -> Option<String> {
    let rest = msg.split("unknown field `").nth(1)?;
    Some(rest.split('`').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(
            suggest(
                "unknown option 'min-savng'",
                "min-savng",
                &["min-saving", "min-macs"]
            ),
            "unknown option 'min-savng': did you mean 'min-saving'?"
        );
        assert_eq!(
            suggest("unknown option 'zzz'", "zzz", &["min-saving"]),
            "unknown option 'zzz'"
        );
        assert_eq!(
            unknown_key("unknown field `bugdet`, expected one of"),
            Some("bugdet".into())
        );
    }
}
