//! Character-level scanning of stripped Rust code: identifiers, words, whitespace and matching brackets.
//! It knows no Rust items (modules, paths, `use`): [`super::source`] and [`super::refs`] build on it.

pub(super) fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

pub(super) fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// Whether the word `word` stands at `i` (not inside a longer identifier).
pub(super) fn word_at(chars: &[char], i: usize, word: &str) -> bool {
    let w: Vec<char> = word.chars().collect();
    chars.get(i..i + w.len()) == Some(&w[..])
        && (i == 0 || !is_ident(chars[i - 1]))
        && !chars.get(i + w.len()).copied().is_some_and(is_ident)
}

pub(super) fn ident_at(chars: &[char], i: usize) -> Option<(String, usize)> {
    let first = *chars.get(i)?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    let mut end = i;
    while chars.get(end).copied().is_some_and(is_ident) {
        end += 1;
    }
    let mut name: String = chars[i..end].iter().collect();
    if let Some(raw) = name.strip_prefix("r#") {
        name = raw.to_owned();
    }
    Some((name, end))
}

/// The index of the bracket closing the one at `open` (or the end).
pub(super) fn matching(chars: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    chars.len()
}
