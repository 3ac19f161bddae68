//! Walking a `serde_json::Value` while tracking the JSON path, so every error names the value it is about.

use std::time::Duration;

use grpc_code::Code;
use serde_json::{Map, Value};

use crate::duration;
use crate::error::{ParseError, Rule};

/// A value and its path.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) value: &'a Value,
    path: &'a Path<'a>,
}

/// A JSON path, built as a linked list so walking allocates nothing until an error is reported.
pub(crate) enum Path<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        match self {
            Path::Root => "$".to_owned(),
            Path::Field(parent, name) => format!("{}.{name}", parent.render()),
            Path::Index(parent, i) => format!("{}[{i}]", parent.render()),
        }
    }
}

impl<'a> At<'a> {
    pub(crate) fn root(value: &'a Value, path: &'a Path<'a>) -> At<'a> {
        At { value, path }
    }

    /// The rendered path, e.g. `$.methodConfig[0]`.
    pub(crate) fn path(&self) -> String {
        self.path.render()
    }

    pub(crate) fn error(&self, rule: Rule) -> ParseError {
        ParseError {
            path: self.path.render(),
            rule,
        }
    }

    pub(crate) fn object(&self) -> Result<&'a Map<String, Value>, ParseError> {
        self.value
            .as_object()
            .ok_or_else(|| self.error(Rule::WrongType("an object")))
    }

    pub(crate) fn array(&self) -> Result<&'a [Value], ParseError> {
        self.value
            .as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| self.error(Rule::WrongType("an array")))
    }

    pub(crate) fn str(&self) -> Result<&'a str, ParseError> {
        self.value
            .as_str()
            .ok_or_else(|| self.error(Rule::WrongType("a string")))
    }

    pub(crate) fn bool(&self) -> Result<bool, ParseError> {
        self.value
            .as_bool()
            .ok_or_else(|| self.error(Rule::WrongType("true or false")))
    }

    /// A non-negative integer: a JSON number without a fraction, or a string of one (proto3 JSON allows both).
    pub(crate) fn uint(&self) -> Result<u64, ParseError> {
        let parsed = match self.value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.parse::<u64>().ok(),
            _ => None,
        };
        parsed.ok_or_else(|| self.error(Rule::WrongType("a non-negative integer")))
    }

    /// A JSON number (or a string of one, as proto3 JSON allows).
    pub(crate) fn number(&self) -> Result<f64, ParseError> {
        let parsed = match self.value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.parse::<f64>().ok(),
            _ => None,
        };
        parsed
            .filter(|f| f.is_finite())
            .ok_or_else(|| self.error(Rule::WrongType("a number")))
    }

    /// A non-negative proto3 JSON duration.
    pub(crate) fn duration(&self) -> Result<Duration, ParseError> {
        let text = self.str()?;
        match duration::parse(text) {
            Some(d) if !d.negative => Ok(d.magnitude),
            Some(_) => Err(self.error(Rule::OutOfRange(format!(
                "duration {text:?} must not be negative"
            )))),
            None => Err(self.error(Rule::BadDuration(text.to_owned()))),
        }
    }

    /// A status code: an integer 0..=16 or a name, case-insensitive.
    pub(crate) fn code(&self) -> Result<Code, ParseError> {
        let code = match self.value {
            Value::Number(n) => n
                .as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .and_then(Code::from_i32),
            Value::String(s) => Code::from_name(s),
            _ => return Err(self.error(Rule::WrongType("a status code name or number"))),
        };
        code.ok_or_else(|| self.error(Rule::UnknownCode(self.value.to_string())))
    }
}

/// Calls `f` with the field `name` of `obj` (at `parent`), if present and not null.
pub(crate) fn field<'a, T>(
    parent: &At<'a>,
    obj: &'a Map<String, Value>,
    name: &'a str,
    f: impl FnOnce(At<'_>) -> Result<T, ParseError>,
) -> Result<Option<T>, ParseError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            let path = Path::Field(parent.path, name);
            f(At { value, path: &path }).map(Some)
        }
    }
}

/// Like [`field`], but the field is required.
pub(crate) fn required<'a, T>(
    parent: &At<'a>,
    obj: &'a Map<String, Value>,
    name: &'a str,
    f: impl FnOnce(At<'_>) -> Result<T, ParseError>,
) -> Result<T, ParseError> {
    match field(parent, obj, name, f)? {
        Some(v) => Ok(v),
        None => {
            let path = Path::Field(parent.path, name);
            Err(At {
                value: &Value::Null,
                path: &path,
            }
            .error(Rule::Missing))
        }
    }
}

/// Calls `f` for each element of an array, with its path.
pub(crate) fn each<'a, T>(
    at: &At<'a>,
    mut f: impl FnMut(At<'_>) -> Result<T, ParseError>,
) -> Result<Vec<T>, ParseError> {
    let items = at.array()?;
    let mut out = Vec::with_capacity(items.len());
    for (i, value) in items.iter().enumerate() {
        let path = Path::Index(at.path, i);
        out.push(f(At { value, path: &path })?);
    }
    Ok(out)
}
