//! Which policy governs a call when both the service config (the service owner, gRFC A6) and the
//! application ([`crate::AppRetryPolicy`]) have one.
//!
//! By default the service config wins: the service owner knows which methods are safe to retry and how
//! hard the service may be hit, and A6 says clients cannot override its policy. The application's policy
//! then applies only to methods whose method config has neither a `retryPolicy` nor a `hedgingPolicy`. An
//! application opts in to its own policy winning with [`Precedence::Application`] (a policy set on one call
//! always does). Disabling retries on the channel (`retries_enabled: false`) turns every policy off,
//! application ones included.

/// Which policy wins when the service config and the application both have one for a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precedence {
    /// The service config's policy wins; the application's applies to methods without one (the default).
    #[default]
    ServiceConfig,
    /// The application's policy wins over the service config's.
    Application,
}

/// Where the policy a call runs came from (for logs and tracing: [`PolicySource::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicySource {
    /// No policy: one attempt plus transparent retries (no policy anywhere, or retries disabled).
    None,
    /// The method config's `retryPolicy` or `hedgingPolicy`.
    ServiceConfig,
    /// The application's policy (the channel's or the call's).
    Application,
}

impl PolicySource {
    /// `"none"`, `"service_config"` or `"application"`: the value of the `retry.policy` tracing field.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::None => "none",
            PolicySource::ServiceConfig => "service_config",
            PolicySource::Application => "application",
        }
    }
}

/// The source of the policy a call runs, by the rules of the module docs.
pub fn select(
    retries_enabled: bool,
    service_config_has_policy: bool,
    application_has_policy: bool,
    precedence: Precedence,
) -> PolicySource {
    match (
        retries_enabled,
        service_config_has_policy,
        application_has_policy,
    ) {
        (false, _, _) => PolicySource::None,
        (true, true, true) if precedence == Precedence::Application => PolicySource::Application,
        (true, true, _) => PolicySource::ServiceConfig,
        (true, false, true) => PolicySource::Application,
        (true, false, false) => PolicySource::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_config_wins_unless_the_application_opts_in() {
        use Precedence::*;
        let cases = [
            // (enabled, sc, app, precedence) -> source
            (
                (true, true, true, ServiceConfig),
                PolicySource::ServiceConfig,
            ),
            ((true, true, true, Application), PolicySource::Application),
            (
                (true, false, true, ServiceConfig),
                PolicySource::Application,
            ),
            (
                (true, true, false, Application),
                PolicySource::ServiceConfig,
            ),
            ((true, false, false, Application), PolicySource::None),
            ((false, true, true, Application), PolicySource::None),
            ((false, false, true, ServiceConfig), PolicySource::None),
        ];
        for ((enabled, sc, app, precedence), want) in cases {
            assert_eq!(
                select(enabled, sc, app, precedence),
                want,
                "{enabled} {sc} {app} {precedence:?}"
            );
        }
        assert_eq!(PolicySource::ServiceConfig.as_str(), "service_config");
    }
}
