//! Data-driven tests of the parser: one `check(json, expected)` helper and many one-line cases. `expected`
//! is either `ok: <summary>` or `error: <path>: <rule>`.

use std::time::Duration;

use grpc_code::Code;
use grpc_retry::{Policy, SplitMix64};

use crate::txt::{self, ChoiceContext};
use crate::{ConfigResult, ConfigSelector, Decision, LbConfig, ParseOptions, ServiceConfig};

fn summary(c: &ServiceConfig) -> String {
    let mut s = format!("lb={}", c.lb_policy().name());
    if let LbConfig::PickFirst {
        shuffle_address_list: true,
    } = c.lb_policy()
    {
        s.push_str("(shuffle)");
    }
    if let Some(t) = c.retry_throttling() {
        s.push_str(&format!(
            " throttle={}/{}",
            t.max_milli_tokens(),
            t.milli_token_ratio()
        ));
    }
    if let Some(name) = c.health_check_service_name() {
        s.push_str(&format!(" health={name:?}"));
    }
    if let Some(mc) = c.method_config("/pkg.S/M") {
        s.push_str(&format!(" S/M:{}", describe(mc)));
    }
    s
}

fn describe(mc: &crate::MethodConfig) -> String {
    let mut parts = Vec::new();
    if let Some(t) = mc.timeout {
        parts.push(format!("timeout={t:?}"));
    }
    if let Some(w) = mc.wait_for_ready {
        parts.push(format!("wfr={w}"));
    }
    if let Some(n) = mc.max_request_message_bytes {
        parts.push(format!("req={n}"));
    }
    if let Some(n) = mc.max_response_message_bytes {
        parts.push(format!("resp={n}"));
    }
    match &mc.policy {
        Policy::None => {}
        Policy::Retry(p) => parts.push(format!(
            "retry(max={} {:?}..{:?} x{} {:?})",
            p.max_attempts().get(),
            p.initial_backoff(),
            p.max_backoff(),
            p.multiplier(),
            p.retryable()
        )),
        Policy::Hedging(p) => parts.push(format!(
            "hedge(max={} {:?} {:?})",
            p.max_attempts().get(),
            p.hedging_delay(),
            p.non_fatal()
        )),
    }
    if let Some(t) = mc.policy.per_attempt_recv_timeout() {
        parts.push(format!("recv_timeout={t:?}"));
    }
    parts.join(" ")
}

#[track_caller]
fn check(json: &str, expected: &str) {
    let got = match ServiceConfig::parse(json, ParseOptions::default()) {
        Ok(c) => format!("ok: {}", summary(&c)),
        Err(e) => format!("error: {}: {}", e.path, e.rule),
    };
    assert_eq!(got, expected, "\n  json: {json}");
}

const RETRY: &str = r#""maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]"#;

fn with_retry(fields: &str) -> String {
    format!(r#"{{"methodConfig":[{{"name":[{{"service":"pkg.S"}}],"retryPolicy":{{{fields}}}}}]}}"#)
}

fn with_method(fields: &str) -> String {
    format!(r#"{{"methodConfig":[{{"name":[{{"service":"pkg.S"}}],{fields}}}]}}"#)
}

#[test]
fn top_level_and_lb() {
    check("{}", "ok: lb=pick_first");
    check(
        "",
        "error: $: not valid JSON: EOF while parsing a value at line 1 column 0",
    );
    check("[]", "error: $: expected an object");
    check(
        r#"{"unknownField": 1, "healthCheckConfig": {"serviceName": "x"}}"#,
        r#"ok: lb=pick_first health="x""#,
    );
    check(
        r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#,
        "ok: lb=round_robin",
    );
    check(
        r#"{"loadBalancingConfig":[{"grpclb":{}},{"round_robin":{}}]}"#,
        "ok: lb=round_robin",
    );
    check(
        r#"{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":true}}]}"#,
        "ok: lb=pick_first(shuffle)",
    );
    check(
        r#"{"loadBalancingConfig":[{"pick_first":{}},{"round_robin":{}}]}"#,
        "ok: lb=pick_first",
    );
    check(
        r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{"childPolicy":[{"round_robin":{}}]}}]}"#,
        "ok: lb=outlier_detection_experimental",
    );
    check(
        r#"{"loadBalancingConfig":[{"weird":{}}]}"#,
        r#"error: $.loadBalancingConfig: no supported load balancing policy in ["weird"]"#,
    );
    check(
        r#"{"loadBalancingConfig":[]}"#,
        "error: $.loadBalancingConfig: no supported load balancing policy in []",
    );
    check(r#"{"loadBalancingConfig":[{"a":{},"b":{}}]}"#, "error: $.loadBalancingConfig[0]: each loadBalancingConfig entry must be an object with exactly one policy name");
    check(
        r#"{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":"yes"}}]}"#,
        "error: $.loadBalancingConfig[0].pick_first.shuffleAddressList: expected true or false",
    );
    check(
        r#"{"loadBalancingConfig":{}}"#,
        "error: $.loadBalancingConfig: expected an array",
    );
    check(
        r#"{"loadBalancingPolicy":"round_robin"}"#,
        "ok: lb=round_robin",
    );
    check(
        r#"{"loadBalancingPolicy":"ROUND_ROBIN"}"#,
        "ok: lb=round_robin",
    );
    check(
        r#"{"loadBalancingPolicy":"fancy"}"#,
        r#"error: $.loadBalancingPolicy: unknown loadBalancingPolicy "fancy""#,
    );
    check(
        r#"{"loadBalancingPolicy":"round_robin","loadBalancingConfig":[{"pick_first":{}}]}"#,
        "ok: lb=pick_first",
    );
}

#[test]
fn health_check_config() {
    check(
        r#"{"healthCheckConfig": {"serviceName": "pkg.S"}}"#,
        r#"ok: lb=pick_first health="pkg.S""#,
    );
    check(
        r#"{"healthCheckConfig": {"serviceName": ""}, "loadBalancingPolicy": "round_robin"}"#,
        "ok: lb=round_robin health=\"\"",
    );
    check("{}", "ok: lb=pick_first");
    check(r#"{"healthCheckConfig": null}"#, "ok: lb=pick_first");
    // As grpc-go: `{}` asks for health checking of the server as a whole.
    check(
        r#"{"healthCheckConfig": {}}"#,
        "ok: lb=pick_first health=\"\"",
    );
    check(
        r#"{"healthCheckConfig": {"serviceName": null}}"#,
        "ok: lb=pick_first health=\"\"",
    );
    check(
        r#"{"healthCheckConfig": {"serviceName": 1}}"#,
        "error: $.healthCheckConfig.serviceName: expected a string",
    );
    check(
        r#"{"healthCheckConfig": {"serviceName": ["a"]}}"#,
        "error: $.healthCheckConfig.serviceName: expected a string",
    );
    check(
        r#"{"healthCheckConfig": "pkg.S"}"#,
        "error: $.healthCheckConfig: expected an object",
    );
    check(
        r#"{"healthCheckConfig": []}"#,
        "error: $.healthCheckConfig: expected an object",
    );
}

#[test]
fn a_bad_health_check_config_keeps_the_last_good_config() {
    // A21: a wrong type in healthCheckConfig refuses the update; the channel keeps its config.
    let mut s = ConfigSelector::new(None);
    let good = config(r#"{"healthCheckConfig": {"serviceName": "pkg.S"}}"#);
    assert_eq!(
        s.update(ConfigResult::Config(good.clone())),
        Decision::Use(good.clone())
    );
    let bad = ServiceConfig::parse(
        r#"{"healthCheckConfig": {"serviceName": 7}}"#,
        ParseOptions::default(),
    )
    .expect_err("a number is not a service name");
    match s.update(ConfigResult::Invalid(bad)) {
        Decision::KeepPrevious(kept, _) => assert_eq!(kept, good),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.current().and_then(|c| c.health_check_service_name()),
        Some("pkg.S")
    );
}

#[test]
fn method_fields() {
    check(
        &with_method(r#""timeout":"1.5s""#),
        "ok: lb=pick_first S/M:timeout=1.5s",
    );
    check(
        &with_method(r#""timeout":"1.5""#),
        r#"error: $.methodConfig[0].timeout: invalid duration "1.5": expected decimal seconds with an 's' suffix, e.g. "0.25s""#,
    );
    check(
        &with_method(r#""timeout":"-1s""#),
        r#"error: $.methodConfig[0].timeout: duration "-1s" must not be negative"#,
    );
    check(
        &with_method(r#""timeout":1"#),
        "error: $.methodConfig[0].timeout: expected a string",
    );
    check(
        &with_method(r#""waitForReady":true"#),
        "ok: lb=pick_first S/M:wfr=true",
    );
    check(
        &with_method(r#""waitForReady":"true""#),
        "error: $.methodConfig[0].waitForReady: expected true or false",
    );
    check(
        &with_method(r#""maxRequestMessageBytes":0,"maxResponseMessageBytes":"1024""#),
        "ok: lb=pick_first S/M:req=0 resp=1024",
    );
    check(
        &with_method(r#""maxRequestMessageBytes":-1"#),
        "error: $.methodConfig[0].maxRequestMessageBytes: expected a non-negative integer",
    );
    check(
        &with_method(r#""maxResponseMessageBytes":4294967296"#),
        "error: $.methodConfig[0].maxResponseMessageBytes: 4294967296 is larger than 4294967295",
    );
    check(
        &with_method(r#""maxResponseMessageBytes":1.5"#),
        "error: $.methodConfig[0].maxResponseMessageBytes: expected a non-negative integer",
    );
}

#[test]
fn names() {
    check(
        r#"{"methodConfig":[{"name":[],"timeout":"1s"}]}"#,
        "ok: lb=pick_first",
    );
    check(
        r#"{"methodConfig":[{"timeout":"1s"}]}"#,
        "ok: lb=pick_first",
    );
    check(
        r#"{"methodConfig":[{"name":[{"method":"M"}]}]}"#,
        "error: $.methodConfig[0].name[0]: a name with an empty service cannot name a method",
    );
    check(
        r#"{"methodConfig":[{"name":[{"service":"","method":"M"}]}]}"#,
        "error: $.methodConfig[0].name[0]: a name with an empty service cannot name a method",
    );
    check(
        r#"{"methodConfig":[{"name":[{"service":"pkg.S","method":"M"}],"timeout":"1s"},{"name":[{"service":"pkg.S","method":"M"}]}]}"#,
        r#"error: $.methodConfig[1].name: duplicate method name "pkg.S/M""#,
    );
    check(
        r#"{"methodConfig":[{"name":[{"service":"pkg.S"},{"service":"pkg.S"}]}]}"#,
        r#"error: $.methodConfig[0].name: duplicate method name "pkg.S/""#,
    );
    check(
        r#"{"methodConfig":[{"name":[{}]},{"name":[{"service":"","method":null}]}]}"#,
        r#"error: $.methodConfig[1].name: duplicate method name "(default)""#,
    );
    check(
        r#"{"methodConfig":[{"name":[{"service":1}]}]}"#,
        "error: $.methodConfig[0].name[0].service: expected a string",
    );
    check(
        r#"{"methodConfig":{}}"#,
        "error: $.methodConfig: expected an array",
    );
}

#[test]
fn name_matching_precedence() {
    let c = ServiceConfig::parse(
        r#"{"methodConfig":[
            {"name":[{}],"timeout":"3s"},
            {"name":[{"service":"pkg.S"}],"timeout":"2s"},
            {"name":[{"service":"pkg.S","method":"M"}],"timeout":"1s"}
        ]}"#,
        ParseOptions::default(),
    )
    .expect("valid");
    let t = |path: &str| c.method_config(path).and_then(|m| m.timeout);
    assert_eq!(
        t("/pkg.S/M"),
        Some(Duration::from_secs(1)),
        "exact method first"
    );
    assert_eq!(
        t("/pkg.S/Other"),
        Some(Duration::from_secs(2)),
        "then the service"
    );
    assert_eq!(
        t("/pkg.T/M"),
        Some(Duration::from_secs(3)),
        "then the default"
    );
    assert_eq!(
        t("/pkg.s/M"),
        Some(Duration::from_secs(3)),
        "paths are case-sensitive"
    );
    let none = ServiceConfig::parse(
        r#"{"methodConfig":[{"name":[{"service":"a.B"}]}]}"#,
        ParseOptions::default(),
    )
    .expect("valid");
    assert!(none.method_config("/pkg.S/M").is_none());
}

#[test]
fn retry_policy() {
    check(
        &with_retry(RETRY),
        "ok: lb=pick_first S/M:retry(max=3 100ms..1s x2 {Unavailable})",
    );
    check(
        &with_retry(&RETRY.replace("3,", "10,")),
        "ok: lb=pick_first S/M:retry(max=5 100ms..1s x2 {Unavailable})",
    );
    check(&with_retry(&RETRY.replace("3,", "1,")), "error: $.methodConfig[0].retryPolicy.maxAttempts: maxAttempts must be greater than 1, got 1");
    check(
        &with_retry(&RETRY.replace("3,", "\"4\",")),
        "ok: lb=pick_first S/M:retry(max=4 100ms..1s x2 {Unavailable})",
    );
    check(
        &with_retry(&RETRY.replace("3,", "2.5,")),
        "error: $.methodConfig[0].retryPolicy.maxAttempts: expected a non-negative integer",
    );
    check(
        &with_retry(&RETRY.replace(r#""maxAttempts":3,"#, "")),
        "error: $.methodConfig[0].retryPolicy.maxAttempts: required field is missing",
    );
    check(&with_retry(&RETRY.replace("0.1s", "0s")), "error: $.methodConfig[0].retryPolicy.initialBackoff: initialBackoff must be greater than zero");
    check(
        &with_retry(&RETRY.replace(r#""1s""#, r#""0s""#)),
        "error: $.methodConfig[0].retryPolicy.maxBackoff: maxBackoff must be greater than zero",
    );
    check(
        &with_retry(&RETRY.replace("0.1s", "100ms")),
        r#"error: $.methodConfig[0].retryPolicy.initialBackoff: invalid duration "100ms": expected decimal seconds with an 's' suffix, e.g. "0.25s""#,
    );
    check(
        &with_retry(&RETRY.replace(r#""initialBackoff":"0.1s","#, "")),
        "error: $.methodConfig[0].retryPolicy.initialBackoff: required field is missing",
    );
    check(&with_retry(&RETRY.replace("\"backoffMultiplier\":2", "\"backoffMultiplier\":0")), "error: $.methodConfig[0].retryPolicy.backoffMultiplier: backoffMultiplier must be greater than zero, got 0");
    check(
        &with_retry(&RETRY.replace("\"backoffMultiplier\":2", "\"backoffMultiplier\":1.5")),
        "ok: lb=pick_first S/M:retry(max=3 100ms..1s x1.5 {Unavailable})",
    );
    check(
        &with_retry(&RETRY.replace("\"backoffMultiplier\":2,", "")),
        "error: $.methodConfig[0].retryPolicy.backoffMultiplier: required field is missing",
    );
    check(
        &with_retry(&RETRY.replace(r#"["UNAVAILABLE"]"#, "[14, \"aborted\", \"Internal\"]")),
        "ok: lb=pick_first S/M:retry(max=3 100ms..1s x2 {Aborted, Internal, Unavailable})",
    );
    check(&with_retry(&RETRY.replace(r#"["UNAVAILABLE"]"#, "[]")), "error: $.methodConfig[0].retryPolicy.retryableStatusCodes: retryableStatusCodes must not be empty");
    check(
        &with_retry(&RETRY.replace(r#"["UNAVAILABLE"]"#, "[17]")),
        "error: $.methodConfig[0].retryPolicy.retryableStatusCodes[0]: unknown status code 17",
    );
    check(
        &with_retry(&RETRY.replace(r#"["UNAVAILABLE"]"#, r#"["UNAVAILABLE","NOPE"]"#)),
        r#"error: $.methodConfig[0].retryPolicy.retryableStatusCodes[1]: unknown status code "NOPE""#,
    );
    check(
        &with_retry(&RETRY.replace(r#"["UNAVAILABLE"]"#, r#""UNAVAILABLE""#)),
        "error: $.methodConfig[0].retryPolicy.retryableStatusCodes: expected an array",
    );
    check(
        &with_retry(&RETRY.replace(r#","retryableStatusCodes":["UNAVAILABLE"]"#, "")),
        "error: $.methodConfig[0].retryPolicy.retryableStatusCodes: required field is missing",
    );
    check(
        &with_method(r#""retryPolicy":[]"#),
        "error: $.methodConfig[0].retryPolicy: expected an object",
    );
}

#[test]
fn per_attempt_recv_timeout() {
    check(
        &with_retry(&format!(r#"{RETRY},"perAttemptRecvTimeout":"0.5s""#)),
        "ok: lb=pick_first S/M:retry(max=3 100ms..1s x2 {Unavailable}) recv_timeout=500ms",
    );
    check(
        &with_retry(&format!(
            r#"{},"perAttemptRecvTimeout":"1s""#,
            RETRY.replace(r#"["UNAVAILABLE"]"#, "[]")
        )),
        "ok: lb=pick_first S/M:retry(max=3 100ms..1s x2 {}) recv_timeout=1s",
    );
    check(
        &with_retry(&format!(r#"{RETRY},"perAttemptRecvTimeout":"0s""#)),
        "error: $.methodConfig[0].retryPolicy.perAttemptRecvTimeout: perAttemptRecvTimeout must be greater than zero",
    );
    check(
        &with_retry(&format!(r#"{RETRY},"perAttemptRecvTimeout":"-1s""#)),
        r#"error: $.methodConfig[0].retryPolicy.perAttemptRecvTimeout: duration "-1s" must not be negative"#,
    );
    check(
        &with_retry(&format!(r#"{RETRY},"perAttemptRecvTimeout":5"#)),
        "error: $.methodConfig[0].retryPolicy.perAttemptRecvTimeout: expected a string",
    );
    check(
        &with_method(
            r#""hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.5s","perAttemptRecvTimeout":"2s"}"#,
        ),
        "ok: lb=pick_first S/M:hedge(max=3 500ms {}) recv_timeout=2s",
    );
    check(
        &with_method(r#""hedgingPolicy":{"maxAttempts":3,"perAttemptRecvTimeout":"0s"}"#),
        "error: $.methodConfig[0].hedgingPolicy.perAttemptRecvTimeout: perAttemptRecvTimeout must be greater than zero",
    );
}

#[test]
fn a_bad_per_attempt_recv_timeout_keeps_the_last_good_config() {
    // A21: an update with an invalid perAttemptRecvTimeout is refused whole, with a typed error; the
    // channel keeps the config it had.
    let mut s = ConfigSelector::new(None);
    let good = config(&with_retry(&format!(
        r#"{RETRY},"perAttemptRecvTimeout":"0.5s""#
    )));
    assert_eq!(
        s.update(ConfigResult::Config(good.clone())),
        Decision::Use(good.clone())
    );
    let bad = ServiceConfig::parse(
        &with_retry(&format!(r#"{RETRY},"perAttemptRecvTimeout":"0s""#)),
        ParseOptions::default(),
    )
    .expect_err("zero is invalid");
    assert_eq!(
        bad.path,
        "$.methodConfig[0].retryPolicy.perAttemptRecvTimeout"
    );
    match s.update(ConfigResult::Invalid(bad)) {
        Decision::KeepPrevious(kept, _) => assert_eq!(kept, good),
        other => panic!("{other:?}"),
    }
    let kept = s
        .current()
        .and_then(|c| c.method_config("/pkg.S/M"))
        .expect("method config");
    assert_eq!(
        kept.policy.per_attempt_recv_timeout(),
        Some(Duration::from_millis(500))
    );
}

#[test]
fn hedging_policy_and_exclusivity() {
    check(
        &with_method(
            r#""hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.5s","nonFatalStatusCodes":["UNAVAILABLE",4]}"#,
        ),
        "ok: lb=pick_first S/M:hedge(max=3 500ms {DeadlineExceeded, Unavailable})",
    );
    check(
        &with_method(r#""hedgingPolicy":{"maxAttempts":9}"#),
        "ok: lb=pick_first S/M:hedge(max=5 0ns {})",
    );
    check(
        &with_method(r#""hedgingPolicy":{"maxAttempts":3,"nonFatalStatusCodes":[]}"#),
        "ok: lb=pick_first S/M:hedge(max=3 0ns {})",
    );
    check(&with_method(r#""hedgingPolicy":{"maxAttempts":1}"#), "error: $.methodConfig[0].hedgingPolicy.maxAttempts: maxAttempts must be greater than 1, got 1");
    check(
        &with_method(r#""hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"-1s"}"#),
        r#"error: $.methodConfig[0].hedgingPolicy.hedgingDelay: duration "-1s" must not be negative"#,
    );
    check(
        &with_method(r#""hedgingPolicy":{"maxAttempts":2,"nonFatalStatusCodes":["nope"]}"#),
        r#"error: $.methodConfig[0].hedgingPolicy.nonFatalStatusCodes[0]: unknown status code "nope""#,
    );
    check(
        &with_method(&format!(
            r#""retryPolicy":{{{RETRY}}},"hedgingPolicy":{{"maxAttempts":2}}"#
        )),
        "error: $.methodConfig[0]: retryPolicy and hedgingPolicy cannot both be set",
    );
}

#[test]
fn retry_throttling() {
    check(
        r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}"#,
        "ok: lb=pick_first throttle=10000/100",
    );
    check(
        r#"{"retryThrottling":{"maxTokens":1000,"tokenRatio":0.5466}}"#,
        "ok: lb=pick_first throttle=1000000/546",
    );
    check(
        r#"{"retryThrottling":{"maxTokens":0,"tokenRatio":1}}"#,
        "error: $.retryThrottling.maxTokens: maxTokens must be an integer in (0, 1000], got 0",
    );
    check(
        r#"{"retryThrottling":{"maxTokens":1001,"tokenRatio":1}}"#,
        "error: $.retryThrottling.maxTokens: maxTokens must be an integer in (0, 1000], got 1001",
    );
    check(r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":0}}"#, "error: $.retryThrottling.tokenRatio: tokenRatio must be greater than zero with three decimals kept, got 0");
    check(r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":0.0004}}"#, "error: $.retryThrottling.tokenRatio: tokenRatio must be greater than zero with three decimals kept, got 0.0004");
    check(r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":-1}}"#, "error: $.retryThrottling.tokenRatio: tokenRatio must be greater than zero with three decimals kept, got -1");
    check(
        r#"{"retryThrottling":{"tokenRatio":1}}"#,
        "error: $.retryThrottling.maxTokens: required field is missing",
    );
    check(
        r#"{"retryThrottling":{"maxTokens":10}}"#,
        "error: $.retryThrottling.tokenRatio: required field is missing",
    );
}

#[test]
fn attempts_cap_is_configurable() {
    let json = with_retry(&RETRY.replace("3,", "8,"));
    let c = ServiceConfig::parse(
        &json,
        ParseOptions {
            max_attempts_cap: 7,
            ..ParseOptions::default()
        },
    )
    .expect("valid");
    match &c.method_config("/pkg.S/M").expect("config").policy {
        Policy::Retry(p) => assert_eq!(p.max_attempts().get(), 7),
        other => panic!("{other:?}"),
    }
}

// ---- TXT records ----------------------------------------------------------------------------------------

fn txt_select(records: &[&[&str]], hostname: Option<&str>, seed: u64) -> String {
    let records: Vec<Vec<Vec<u8>>> = records
        .iter()
        .map(|r| r.iter().map(|s| s.as_bytes().to_vec()).collect())
        .collect();
    let mut rng = SplitMix64::new(seed);
    let mut ctx = ChoiceContext {
        language: txt::CLIENT_LANGUAGE,
        hostname,
        rng: &mut rng,
    };
    match txt::select(&records, &mut ctx, ParseOptions::default()) {
        Ok(Some(c)) => format!("ok: {}", summary(&c)),
        Ok(None) => "none".to_owned(),
        Err(e) => format!("error: {}: {}", e.path, e.rule),
    }
}

#[test]
fn txt_choices() {
    let rr = r#"{"serviceConfig":{"loadBalancingPolicy":"round_robin"}}"#;
    let one =
        |choices: &str| txt_select(&[&[&format!("grpc_config={choices}")]], Some("host-a"), 1);
    assert_eq!(one(&format!("[{rr}]")), "ok: lb=round_robin");
    assert_eq!(one("[]"), "none");
    assert_eq!(
        one(
            r#"[{"clientLanguage":["go","RUST"],"serviceConfig":{"loadBalancingPolicy":"round_robin"}}]"#
        ),
        "ok: lb=round_robin"
    );
    assert_eq!(
        one(
            r#"[{"clientLanguage":["go"],"serviceConfig":{"loadBalancingPolicy":"round_robin"}},{"serviceConfig":{}}]"#
        ),
        "ok: lb=pick_first"
    );
    assert_eq!(
        one(r#"[{"clientLanguage":[],"serviceConfig":{"loadBalancingPolicy":"round_robin"}}]"#),
        "ok: lb=round_robin"
    );
    assert_eq!(
        one(
            r#"[{"clientHostname":["host-a"],"serviceConfig":{"loadBalancingPolicy":"round_robin"}}]"#
        ),
        "ok: lb=round_robin"
    );
    assert_eq!(
        one(
            r#"[{"clientHostname":["HOST-A"],"serviceConfig":{"loadBalancingPolicy":"round_robin"}}]"#
        ),
        "none",
        "hostnames are case-sensitive"
    );
    assert_eq!(one(r#"[{"percentage":0,"serviceConfig":{}}]"#), "none");
    assert_eq!(
        one(r#"[{"percentage":100,"serviceConfig":{"loadBalancingPolicy":"round_robin"}}]"#),
        "ok: lb=round_robin"
    );
    assert_eq!(
        one(r#"[{"percentage":101,"serviceConfig":{}}]"#),
        "error: $[0].percentage: percentage must be an integer in 0..=100, got 101"
    );
    assert_eq!(
        one(r#"[{"percentage":50.5,"serviceConfig":{}}]"#),
        "error: $[0].percentage: expected a non-negative integer"
    );
    assert_eq!(
        one(r#"[{"color":"blue","serviceConfig":{}}]"#),
        r#"error: $[0]: unknown field "color" in a service config choice"#
    );
    assert_eq!(
        one(r#"[{"clientLanguage":["rust"]}]"#),
        "error: $[0].serviceConfig: required field is missing"
    );
    assert_eq!(
        one(r#"[{"serviceConfig":"{}"}]"#),
        "error: $[0].serviceConfig: expected an object"
    );
    assert_eq!(
        one(r#"{"serviceConfig":{}}"#),
        "error: $: expected an array"
    );
    assert_eq!(
        one("not json"),
        "error: $: not valid JSON: expected ident at line 1 column 2"
    );
    // Only the chosen config is validated.
    assert_eq!(
        one(r#"[{"serviceConfig":{}},{"serviceConfig":{"loadBalancingPolicy":"bogus"}}]"#),
        "ok: lb=pick_first"
    );
    assert_eq!(
        one(r#"[{"serviceConfig":{"loadBalancingPolicy":"bogus"}},{"serviceConfig":{}}]"#),
        r#"error: $[0].serviceConfig.loadBalancingPolicy: unknown loadBalancingPolicy "bogus""#
    );
}

#[test]
fn txt_records_and_prefix() {
    // One record's strings are joined with no separator.
    let split: &[&str] = &[
        "grpc_config=[{\"serviceCon",
        "fig\":{\"loadBalancingPolicy\":\"round_robin\"}}]",
    ];
    assert_eq!(txt_select(&[split], None, 1), "ok: lb=round_robin");
    // A record without the prefix is not a config; another record may be.
    let other: &[&str] = &["v=spf1 -all"];
    assert_eq!(txt_select(&[other], None, 1), "none");
    assert_eq!(txt_select(&[other, split], None, 1), "ok: lb=round_robin");
    assert_eq!(txt_select(&[], None, 1), "none");
    // A prefix split across strings still counts.
    let prefix_split: &[&str] = &["grpc_", "config=[]"];
    assert_eq!(txt_select(&[prefix_split], None, 1), "none");
}

#[test]
fn percentage_is_sampled_exactly() {
    let choices = r#"grpc_config=[{"percentage":30,"serviceConfig":{"loadBalancingPolicy":"round_robin"}},{"serviceConfig":{}}]"#;
    let n = 20_000;
    let hits = (0..n)
        .filter(|seed| txt_select(&[&[choices]], None, *seed) == "ok: lb=round_robin")
        .count();
    let share = hits as f64 / n as f64;
    assert!((share - 0.30).abs() < 0.015, "{share}");
}

// ---- A21 ---------------------------------------------------------------------------------------------------

fn config(json: &str) -> std::sync::Arc<ServiceConfig> {
    std::sync::Arc::new(ServiceConfig::parse(json, ParseOptions::default()).expect("valid"))
}

fn invalid() -> ConfigResult {
    ConfigResult::Invalid(
        ServiceConfig::parse(r#"{"loadBalancingPolicy":"x"}"#, ParseOptions::default())
            .expect_err("invalid"),
    )
}

#[test]
fn a21_keeps_the_last_good_config() {
    let mut s = ConfigSelector::new(None);
    let good = config(r#"{"loadBalancingPolicy":"round_robin"}"#);
    assert_eq!(
        s.update(ConfigResult::Config(good.clone())),
        Decision::Use(good.clone())
    );
    match s.update(invalid()) {
        Decision::KeepPrevious(kept, _) => assert_eq!(kept, good),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.current(), Some(&good));
}

#[test]
fn a21_a_first_bad_config_fails_without_a_default_and_uses_the_default_with_one() {
    let mut s = ConfigSelector::new(None);
    assert!(matches!(s.update(invalid()), Decision::Fail(_)));
    assert!(s.current().is_none());
    let default = ServiceConfig::parse(
        r#"{"loadBalancingPolicy":"round_robin"}"#,
        ParseOptions::default(),
    )
    .expect("valid");
    let mut d = ConfigSelector::new(Some(default.clone()));
    assert_eq!(
        d.update(invalid()),
        Decision::Use(std::sync::Arc::new(default))
    );
}

#[test]
fn a21_no_config_means_the_default_or_empty() {
    let mut s = ConfigSelector::new(None);
    assert_eq!(
        s.update(ConfigResult::None),
        Decision::Use(std::sync::Arc::new(ServiceConfig::empty()))
    );
    let default = ServiceConfig::parse(
        r#"{"loadBalancingPolicy":"round_robin"}"#,
        ParseOptions::default(),
    )
    .expect("valid");
    let mut d = ConfigSelector::new(Some(default.clone()));
    d.update(ConfigResult::Config(config("{}")));
    assert_eq!(
        d.update(ConfigResult::None),
        Decision::Use(std::sync::Arc::new(default))
    );
}

#[test]
fn a21_failed_lookup_keeps_the_current_config() {
    let mut s = ConfigSelector::new(None);
    let good = config(r#"{"loadBalancingPolicy":"round_robin"}"#);
    s.update(ConfigResult::Config(good.clone()));
    assert_eq!(
        s.update(ConfigResult::LookupFailed("timeout".into())),
        Decision::Use(good)
    );
    let mut fresh = ConfigSelector::new(None);
    assert_eq!(
        fresh.update(ConfigResult::LookupFailed("timeout".into())),
        Decision::Use(std::sync::Arc::new(ServiceConfig::empty()))
    );
}

#[test]
fn codes_accept_numbers_and_names_in_any_case() {
    for (json, code) in [
        ("14", Code::Unavailable),
        ("\"unavailable\"", Code::Unavailable),
        ("\"Deadline_Exceeded\"", Code::DeadlineExceeded),
        ("0", Code::Ok),
    ] {
        let c = ServiceConfig::parse(
            &with_retry(&RETRY.replace(r#""UNAVAILABLE""#, json)),
            ParseOptions::default(),
        )
        .expect(json);
        match &c.method_config("/pkg.S/M").expect("mc").policy {
            Policy::Retry(p) => assert!(p.retryable().contains(code), "{json}"),
            other => panic!("{other:?}"),
        }
    }
}
