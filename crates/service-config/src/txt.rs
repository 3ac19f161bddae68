//! Service config in DNS TXT records (gRFC A2): the record at `_grpc_config.<host>` whose strings,
//! concatenated, start with `grpc_config=`, followed by a JSON array of choices. The first choice whose
//! criteria all match (`clientLanguage`, case-insensitive; `percentage`, sampled exactly p/100;
//! `clientHostname`, case-sensitive) gives the service config. Only that choice's config is validated.

use grpc_retry::Rng;
use serde_json::Value;

use crate::error::{ParseError, Rule};
use crate::json::{each, field, required, At, Path};
use crate::service_config::{ParseOptions, ServiceConfig};

/// The language this client matches in `clientLanguage`.
pub const CLIENT_LANGUAGE: &str = "rust";

/// The attribute prefix of a service config TXT record.
pub const PREFIX: &[u8] = b"grpc_config=";

/// What a choice is matched against.
pub struct ChoiceContext<'a> {
    /// The client's language (compared case-insensitively): [`CLIENT_LANGUAGE`].
    pub language: &'a str,
    /// The machine's host name (compared case-sensitively), if known.
    pub hostname: Option<&'a str>,
    /// The randomness for `percentage`.
    pub rng: &'a mut dyn Rng,
}

/// The service config a TXT answer selects: `Ok(None)` when no record has the prefix or no choice
/// matches, `Err` when the records or the chosen config are invalid. `records` holds, per TXT record, its
/// character strings.
pub fn select(
    records: &[Vec<Vec<u8>>],
    ctx: &mut ChoiceContext<'_>,
    options: ParseOptions,
) -> Result<Option<ServiceConfig>, ParseError> {
    let Some(json) = records.iter().find_map(|strings| {
        let joined: Vec<u8> = strings.concat();
        joined.strip_prefix(PREFIX).map(<[u8]>::to_vec)
    }) else {
        return Ok(None);
    };
    let value: Value = serde_json::from_slice(&json).map_err(|e| ParseError {
        path: "$".to_owned(),
        rule: Rule::NotJson(e.to_string()),
    })?;
    let root = Path::Root;
    let at = At::root(&value, &root);
    let choices = at.array()?;
    for (i, _) in choices.iter().enumerate() {
        let path = Path::Index(&root, i);
        let choice = At::root(&choices[i], &path);
        if let Some(config) = evaluate(choice, ctx)? {
            return ServiceConfig::from_value(config, options)
                .map(Some)
                .map_err(|mut e| {
                    e.path = e.path.replacen('$', &format!("$[{i}].serviceConfig"), 1);
                    e
                });
        }
    }
    Ok(None)
}

/// Checks one choice's fields and criteria; returns its `serviceConfig` if it matches.
fn evaluate<'a>(
    choice: At<'a>,
    ctx: &mut ChoiceContext<'_>,
) -> Result<Option<&'a Value>, ParseError> {
    let obj = choice.object()?;
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "clientLanguage" | "percentage" | "clientHostname" | "serviceConfig"
        ) {
            return Err(choice.error(Rule::UnknownChoiceField(key.clone())));
        }
    }
    let languages = field(&choice, obj, "clientLanguage", |l| {
        each(&l, |s| s.str().map(str::to_owned))
    })?;
    let percentage = field(&choice, obj, "percentage", |p| {
        let n = p.uint()?;
        let is_integer_literal = p.value.as_u64().is_some();
        if n > 100 || !is_integer_literal {
            return Err(p.error(Rule::OutOfRange(format!(
                "percentage must be an integer in 0..=100, got {}",
                p.value
            ))));
        }
        Ok(n)
    })?;
    let hostnames = field(&choice, obj, "clientHostname", |h| {
        each(&h, |s| s.str().map(str::to_owned))
    })?;
    let config = required(&choice, obj, "serviceConfig", |c| c.object().map(|_| ()))
        .map(|()| obj.get("serviceConfig"))?;

    if let Some(langs) = languages.filter(|l| !l.is_empty()) {
        if !langs.iter().any(|l| l.eq_ignore_ascii_case(ctx.language)) {
            return Ok(None);
        }
    }
    if let Some(p) = percentage {
        // Exactly p/100: a uniform draw in 1..=100 must be at most p.
        let draw = ctx.rng.next_u64() % 100 + 1;
        if draw > p {
            return Ok(None);
        }
    }
    if let Some(hosts) = hostnames.filter(|h| !h.is_empty()) {
        match ctx.hostname {
            Some(me) if hosts.iter().any(|h| h == me) => {}
            _ => return Ok(None),
        }
    }
    Ok(config)
}
