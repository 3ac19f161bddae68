//! `--name=value` flags as the interop runners pass them (also `--name value` and bare `--bool_flag`).

use std::collections::HashMap;

/// Parsed flags.
#[derive(Debug, Default)]
pub struct Flags {
    values: HashMap<String, String>,
}

impl Flags {
    /// Parses `args` (without the program name), accepting only the `known` flag names.
    pub fn parse(args: impl IntoIterator<Item = String>, known: &[&str]) -> Result<Flags, String> {
        let mut values = HashMap::new();
        let mut args = args.into_iter().peekable();
        while let Some(arg) = args.next() {
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n.to_owned(), v.to_owned()),
                None => match args.peek() {
                    Some(next) if !next.starts_with("--") => {
                        (flag.to_owned(), args.next().unwrap_or_default())
                    }
                    _ => (flag.to_owned(), "true".to_owned()),
                },
            };
            if !known.contains(&name.as_str()) {
                return Err(format!(
                    "unknown flag --{name}; known flags: --{}",
                    known.join(", --")
                ));
            }
            values.insert(name, value);
        }
        Ok(Flags { values })
    }

    /// A string flag.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A boolean flag (`true`/`false`/`1`/`0`), or `default`.
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.str(name) {
            None => Ok(default),
            Some("true" | "1") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(other) => Err(format!("--{name}: expected true or false, got {other:?}")),
        }
    }

    /// A number flag, or `default`.
    pub fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.str(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: {v:?} is not a valid number")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_the_three_forms() {
        let f =
            Flags::parse(args(&["--a=1", "--b", "2", "--c"]), &["a", "b", "c"]).expect("parses");
        assert_eq!(f.str("a"), Some("1"));
        assert_eq!(f.num("b", 0u32), Ok(2));
        assert_eq!(f.bool("c", false), Ok(true));
        assert_eq!(f.bool("missing", true), Ok(true));
    }

    #[test]
    fn refuses_unknown_flags_and_bad_values() {
        assert!(Flags::parse(args(&["--nope=1"]), &["a"]).is_err());
        assert!(Flags::parse(args(&["positional"]), &["a"]).is_err());
        let f = Flags::parse(args(&["--a=x"]), &["a"]).expect("parses");
        assert!(f.num("a", 0u32).is_err());
        assert!(f.bool("a", false).is_err());
    }
}
