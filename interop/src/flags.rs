//! `--name=value` flags as the interop runners pass them (also `--name value` and bare `--bool_flag`).
//!
//! A program lists its flags once, as a table of [`FlagSpec`]s: [`Flags::parse`] accepts exactly those names
//! and [`help_text`] prints them, so the help and the parser cannot drift apart. (A plain list of names works
//! too, for programs without a help text.)

use std::collections::HashMap;

/// One flag a program accepts, for parsing and for `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagSpec {
    /// The name, without the leading `--`.
    pub name: &'static str,
    /// The form of the value (`HOST`, `N`, `BOOL`, ...); empty for a flag that takes none (`--help`).
    pub value: &'static str,
    /// The default, as shown in the help; empty when there is none.
    pub default: &'static str,
    /// A one-line description.
    pub help: &'static str,
}

/// Something that names a known flag: a [`FlagSpec`] or a plain `&str`.
pub trait KnownFlag {
    /// The flag's name, without the leading `--`.
    fn flag_name(&self) -> &str;
}

impl KnownFlag for FlagSpec {
    fn flag_name(&self) -> &str {
        self.name
    }
}

impl KnownFlag for &str {
    fn flag_name(&self) -> &str {
        self
    }
}

/// The help text for `specs`: one line per flag, `  --name=VALUE  description (default: D)`, aligned.
pub fn help_text(specs: &[FlagSpec]) -> String {
    let usage = |s: &FlagSpec| {
        if s.value.is_empty() {
            format!("--{}", s.name)
        } else {
            format!("--{}={}", s.name, s.value)
        }
    };
    let width = specs.iter().map(|s| usage(s).len()).max().unwrap_or(0);
    let mut out = String::new();
    for s in specs {
        let line = if s.default.is_empty() {
            format!("  {:<width$}  {}", usage(s), s.help)
        } else {
            format!(
                "  {:<width$}  {} (default: {})",
                usage(s),
                s.help,
                s.default
            )
        };
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Parsed flags.
#[derive(Debug, Default)]
pub struct Flags {
    values: HashMap<String, String>,
    /// The names `parse` accepted, so that reading an unlisted flag is caught in debug builds and tests.
    known: Vec<String>,
}

impl Flags {
    /// Parses `args` (without the program name), accepting only the `known` flag names. `-h` stands for
    /// `--help` when `help` is one of them.
    pub fn parse<K: KnownFlag>(
        args: impl IntoIterator<Item = String>,
        known: &[K],
    ) -> Result<Flags, String> {
        let names: Vec<String> = known.iter().map(|k| k.flag_name().to_owned()).collect();
        let mut values = HashMap::new();
        let mut args = args.into_iter().peekable();
        while let Some(arg) = args.next() {
            if arg == "-h" && names.iter().any(|n| n == "help") {
                values.insert("help".to_owned(), "true".to_owned());
                continue;
            }
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
            if !names.contains(&name) {
                return Err(format!(
                    "unknown flag --{name}; known flags: --{}",
                    names.join(", --")
                ));
            }
            values.insert(name, value);
        }
        Ok(Flags {
            values,
            known: names,
        })
    }

    /// A string flag.
    pub fn str(&self, name: &str) -> Option<&str> {
        debug_assert!(
            self.known.is_empty() || self.known.iter().any(|k| k == name),
            "flag --{name} is read but not in the flag table"
        );
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
        let f = Flags::parse(args(&["--a=1", "--b", "2", "--c"]), &["a", "b", "c", "d"])
            .expect("parses");
        assert_eq!(f.str("a"), Some("1"));
        assert_eq!(f.num("b", 0u32), Ok(2));
        assert_eq!(f.bool("c", false), Ok(true));
        assert_eq!(f.bool("d", true), Ok(true));
    }

    #[test]
    fn refuses_unknown_flags_and_bad_values() {
        assert!(Flags::parse(args(&["--nope=1"]), &["a"]).is_err());
        assert!(Flags::parse(args(&["positional"]), &["a"]).is_err());
        let f = Flags::parse(args(&["--a=x"]), &["a"]).expect("parses");
        assert!(f.num("a", 0u32).is_err());
        assert!(f.bool("a", false).is_err());
    }

    const TABLE: &[FlagSpec] = &[
        FlagSpec {
            name: "port",
            value: "PORT",
            default: "0",
            help: "port to listen on",
        },
        FlagSpec {
            name: "use_tls",
            value: "BOOL",
            default: "",
            help: "TLS or plaintext",
        },
        FlagSpec {
            name: "help",
            value: "",
            default: "",
            help: "print this help and exit",
        },
    ];

    #[test]
    fn help_lists_every_flag_on_its_own_line() {
        let help = help_text(TABLE);
        let lines: Vec<&str> = help.lines().collect();
        assert_eq!(lines.len(), TABLE.len());
        assert_eq!(lines[0], "  --port=PORT     port to listen on (default: 0)");
        assert_eq!(lines[1], "  --use_tls=BOOL  TLS or plaintext");
        assert_eq!(lines[2], "  --help          print this help and exit");
    }

    #[test]
    fn a_table_drives_the_parser() {
        let f = Flags::parse(args(&["--port=5", "-h"]), TABLE).expect("parses");
        assert_eq!(f.num("port", 0u16), Ok(5));
        assert_eq!(f.bool("help", false), Ok(true));
        let e = Flags::parse(args(&["--bogus"]), TABLE).expect_err("unknown");
        assert!(e.contains("--port, --use_tls, --help"), "{e}");
        // `-h` is only `--help` for programs that have one.
        assert!(Flags::parse(args(&["-h"]), &["a"]).is_err());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not in the flag table")]
    fn reading_an_unlisted_flag_is_caught() {
        let f = Flags::parse(args(&[]), TABLE).expect("parses");
        let _ = f.str("nope");
    }
}
