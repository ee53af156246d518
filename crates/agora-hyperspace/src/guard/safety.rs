//! `guard.checkSafety` and redaction (Hyperspace spec §4.2 `guard.checkSafety`, §9.3 "Privacy"):
//! the PII and secret detectors (regular expressions plus the Luhn, IBAN mod-97 and SSN checks),
//! how a `policy` selects among them, and [`redact_text`] / [`redact_value`] for what leaves
//! the node.
//!
//! # The safety policy
//!
//! `checkSafety` scans `content` — a string, or any JSON value, in which case every string,
//! object key and number is scanned — with fixed, deterministic detectors (regular expressions
//! from the linear-time `regex` crate plus checksums). A finding is reported as its flag name;
//! `flags` is sorted and has no duplicates; `safe` is `flags` being empty.
//!
//! | flag | finds |
//! |---|---|
//! | `pii.email` | `local@domain.tld` |
//! | `pii.phone` | `+` and 8–15 digits (E.164, separators ` .-()` allowed), or a North American number `(NXX) NXX-XXXX` / `NXX-NXX-XXXX` / `NXX.NXX.XXXX` / `NXX NXX XXXX` with area code and exchange starting 2–9 |
//! | `pii.credit_card` | 13–19 digits (single spaces or dashes between groups) with a card-network prefix (Visa 4, Mastercard 51–55 / 2221–2720, Amex 34/37, Discover 6011/65/644–649, JCB 3528–3589, Diners 300–305/36/38, UnionPay 62) **and** a valid Luhn checksum |
//! | `pii.ssn` | US SSN `AAA-GG-SSSS` with area not 000/666/9xx, group not 00, serial not 0000 |
//! | `pii.iban` | an IBAN (country code, 2 check digits, 11–30 alphanumerics, optional spaces every 4) whose ISO 7064 mod-97 checksum is valid |
//! | `secret.private_key` | a PEM `-----BEGIN … PRIVATE KEY-----` header (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP … BLOCK) |
//! | `secret.aws_access_key` | `AKIA`/`ASIA`/`ABIA`/`ACCA` followed by 16 uppercase alphanumerics |
//! | `secret.bearer_token` | `Bearer ` followed by 20 or more token characters |
//! | `secret.jwt` | a compact JWS `eyJ….eyJ….…` |
//! | `secret.api_key` | a well-known key format (OpenAI `sk-…`, Anthropic `sk-ant-…`, Stripe `sk_live_`/`rk_live_`/`sk_test_`, GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`, Slack `xox?-`, Google `AIza…`, GitLab `glpat-`, Hugging Face `hf_`), or an assignment such as `api_key = …`, `access_token: …`, `client_secret=…` whose value has 16+ characters including a letter and a digit |
//! | `secret.password` | an assignment `password = …` / `passwd: …` / `pwd=…` with a value of 6+ characters that is not a mask (`******`) |
//!
//! `policy` is optional and selects what to look for. It is either a string — `"all"` or
//! `"default"` (everything), a category (`"pii"`, `"secret"`/`"secrets"`) or one flag name — or an
//! object `{"categories"?: [..], "ignore"?: [..], "enforce"?: bool}` where `categories` (default:
//! everything) and `ignore` (default: nothing) hold the same selectors. An unknown selector is
//! −32602. With `"enforce": true`, an unsafe result is the error −32004 "Safety Violation" with
//! `data: {"flags": [..]}` instead of `{safe: false}`.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::{CheckSafetyParams, CheckSafetyResult, SafetyPolicyParam};
use crate::jsonrpc::RpcError;
use crate::params::invalid_params;

/// One kind of finding of the safety policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SafetyFlag {
    /// `pii.email`.
    PiiEmail,
    /// `pii.phone`.
    PiiPhone,
    /// `pii.credit_card`.
    PiiCreditCard,
    /// `pii.ssn`.
    PiiSsn,
    /// `pii.iban`.
    PiiIban,
    /// `secret.private_key`.
    SecretPrivateKey,
    /// `secret.aws_access_key`.
    SecretAwsAccessKey,
    /// `secret.bearer_token`.
    SecretBearerToken,
    /// `secret.jwt`.
    SecretJwt,
    /// `secret.api_key`.
    SecretApiKey,
    /// `secret.password`.
    SecretPassword,
}

impl SafetyFlag {
    /// Every flag.
    pub const ALL: [Self; 11] = [
        Self::PiiEmail,
        Self::PiiPhone,
        Self::PiiCreditCard,
        Self::PiiSsn,
        Self::PiiIban,
        Self::SecretPrivateKey,
        Self::SecretAwsAccessKey,
        Self::SecretBearerToken,
        Self::SecretJwt,
        Self::SecretApiKey,
        Self::SecretPassword,
    ];

    /// The wire name (`"pii.email"`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PiiEmail => "pii.email",
            Self::PiiPhone => "pii.phone",
            Self::PiiCreditCard => "pii.credit_card",
            Self::PiiSsn => "pii.ssn",
            Self::PiiIban => "pii.iban",
            Self::SecretPrivateKey => "secret.private_key",
            Self::SecretAwsAccessKey => "secret.aws_access_key",
            Self::SecretBearerToken => "secret.bearer_token",
            Self::SecretJwt => "secret.jwt",
            Self::SecretApiKey => "secret.api_key",
            Self::SecretPassword => "secret.password",
        }
    }

    /// `"pii"` or `"secret"`.
    #[must_use]
    pub const fn category(self) -> &'static str {
        match self {
            Self::PiiEmail
            | Self::PiiPhone
            | Self::PiiCreditCard
            | Self::PiiSsn
            | Self::PiiIban => "pii",
            _ => "secret",
        }
    }

    /// The flags a selector names: `"all"`, `"default"`, a category, or one flag name.
    #[must_use]
    pub fn select(selector: &str) -> Option<Vec<Self>> {
        let category = match selector {
            "all" | "default" => return Some(Self::ALL.to_vec()),
            "secrets" => "secret",
            other => other,
        };
        let flags: Vec<Self> = Self::ALL
            .into_iter()
            .filter(|flag| flag.category() == category || flag.as_str() == selector)
            .collect();
        (!flags.is_empty()).then_some(flags)
    }
}

/// A resolved policy: which flags to look for, and whether to fail with −32004.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPolicy {
    /// The flags to look for.
    pub flags: BTreeSet<SafetyFlag>,
    /// Answer −32004 when anything is found.
    pub enforce: bool,
}

impl Default for ResolvedPolicy {
    fn default() -> Self {
        Self {
            flags: SafetyFlag::ALL.into_iter().collect(),
            enforce: false,
        }
    }
}

impl ResolvedPolicy {
    /// Resolves the `policy` param; everything when absent.
    ///
    /// # Errors
    ///
    /// −32602 naming the unknown selector.
    pub fn from_param(param: Option<&SafetyPolicyParam>) -> Result<Self, RpcError> {
        let select = |field: &str, selector: &str| {
            SafetyFlag::select(selector).ok_or_else(|| {
                invalid_params(
                    format!(
                        "{field}: unknown safety selector {selector:?} (use \"all\", \"pii\", \"secret\" or a flag name such as \"pii.email\")"
                    ),
                    Some(field),
                )
            })
        };
        match param {
            None => Ok(Self::default()),
            Some(SafetyPolicyParam::Selector(selector)) => Ok(Self {
                flags: select("policy", selector)?.into_iter().collect(),
                enforce: false,
            }),
            Some(SafetyPolicyParam::Rules(rules)) => {
                let mut flags = BTreeSet::new();
                match &rules.categories {
                    None => flags.extend(SafetyFlag::ALL),
                    Some(selectors) => {
                        for selector in selectors {
                            flags.extend(select("policy.categories", selector)?);
                        }
                    }
                }
                for selector in rules.ignore.iter().flatten() {
                    for flag in select("policy.ignore", selector)? {
                        flags.remove(&flag);
                    }
                }
                Ok(Self {
                    flags,
                    enforce: rules.enforce.unwrap_or(false),
                })
            }
        }
    }
}

struct Detector {
    flag: SafetyFlag,
    regex: Regex,
    /// Decides on the candidate: capture group 1 if the regex has one, else the whole match.
    accept: Accept,
}

/// Decides whether a regex candidate is a finding.
type Accept = fn(&str) -> bool;

const DETECTOR_PATTERNS: &[(SafetyFlag, &str, Accept)] = &[
    (
        SafetyFlag::PiiEmail,
        r"(?i)(?-u:\b)[a-z0-9](?:[a-z0-9._%+-]{0,62}[a-z0-9_%+-])?@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?-u:\b)",
        accept_any,
    ),
    (
        SafetyFlag::PiiPhone,
        r"(?:^|[^\w+])(\+\d[\d .()-]{6,22}\d)",
        accept_e164,
    ),
    (
        SafetyFlag::PiiPhone,
        r"(?:^|[^\w+.-])(\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[ .-]\d{3}[ .-]\d{4})(?-u:\b)",
        accept_nanp,
    ),
    (
        SafetyFlag::PiiCreditCard,
        r"(?-u:\b)\d+(?:[ -]\d+)*(?-u:\b)",
        accept_card_run,
    ),
    (
        SafetyFlag::PiiSsn,
        r"(?-u:\b)\d+(?:[ -]\d+)*(?-u:\b)",
        accept_ssn_run,
    ),
    (
        SafetyFlag::PiiIban,
        r"(?-u:\b)[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?-u:\b)",
        accept_iban,
    ),
    (
        SafetyFlag::SecretPrivateKey,
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        accept_any,
    ),
    (
        SafetyFlag::SecretAwsAccessKey,
        r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?-u:\b)",
        accept_any,
    ),
    (
        SafetyFlag::SecretBearerToken,
        r"(?i)(?-u:\b)bearer[ \t]+[a-z0-9._~+/-]{20,}=*",
        accept_any,
    ),
    (
        SafetyFlag::SecretJwt,
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        accept_any,
    ),
    (
        SafetyFlag::SecretApiKey,
        r"(?-u:\b)(?:sk-[A-Za-z0-9]{32,}|sk-(?:proj|svcacct|admin|ant)-[A-Za-z0-9_-]{32,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,})",
        accept_any,
    ),
    (
        SafetyFlag::SecretApiKey,
        r#"(?i)(?-u:\b)(?:api[_-]?key|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|private[_-]?token)["']?\s*[:=]\s*["']?([a-z0-9_./+=-]{16,})"#,
        accept_mixed_secret,
    ),
    (
        SafetyFlag::SecretPassword,
        r#"(?i)(?-u:\b)(?:password|passwd|pwd)["']?\s*[:=]\s*["']?([^\s"',;]{6,})"#,
        accept_password,
    ),
];

static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
    DETECTOR_PATTERNS
        .iter()
        .filter_map(|&(flag, pattern, accept)| {
            // Every pattern is a constant checked by a unit test; none fails to compile.
            Regex::new(pattern).ok().map(|regex| Detector {
                flag,
                regex,
                accept,
            })
        })
        .collect()
});

fn accept_any(_: &str) -> bool {
    true
}

fn digits(text: &str) -> Vec<u8> {
    text.bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect()
}

fn accept_e164(candidate: &str) -> bool {
    (8..=15).contains(&digits(candidate).len())
}

fn accept_nanp(candidate: &str) -> bool {
    let d = digits(candidate);
    d.len() == 10 && d[0] >= 2 && d[3] >= 2
}

/// The digit groups of a run like `4111 1111-1111 1111`, each with the separator before it.
fn groups(run: &str) -> Vec<(Option<char>, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut separator = None;
    for (index, ch) in run.char_indices() {
        if ch == ' ' || ch == '-' {
            out.push((separator, &run[start..index]));
            separator = Some(ch);
            start = index + 1;
        }
    }
    out.push((separator, &run[start..]));
    out
}

/// Some contiguous groups of the run hold 13–19 digits with a card prefix and a valid Luhn sum.
/// Linear in the run: from each group, at most the groups that make 19 digits are joined (a run
/// of a million one-digit groups used to be joined from every start to the end), and only from
/// groups that start like a card number.
fn accept_card_run(run: &str) -> bool {
    let groups = groups(run);
    (0..groups.len()).any(|start| {
        // Every card network's numbers start with 2–6.
        if !matches!(groups[start].1.as_bytes().first(), Some(b'2'..=b'6')) {
            return false;
        }
        let mut digits = [0u8; 19];
        let mut len = 0;
        let mut network = None;
        for (_, group) in &groups[start..] {
            for byte in group.bytes() {
                if len == digits.len() || !byte.is_ascii_digit() {
                    return false;
                }
                digits[len] = byte - b'0';
                len += 1;
            }
            if len >= 13
                && *network.get_or_insert_with(|| card_network(&digits))
                && luhn_digits(digits[..len].iter().copied())
            {
                return true;
            }
        }
        false
    })
}

/// Digits (values 0–9, at least 4) that start with a card network's prefix.
fn card_network(digits: &[u8]) -> bool {
    let prefix = |n: usize| {
        digits
            .iter()
            .take(n)
            .fold(0u32, |acc, d| acc * 10 + u32::from(*d))
    };
    digits.first() == Some(&4)
        || (51..=55).contains(&prefix(2))
        || (2221..=2720).contains(&prefix(4))
        || matches!(prefix(2), 34 | 37 | 36 | 38 | 65 | 62)
        || prefix(4) == 6011
        || (644..=649).contains(&prefix(3))
        || (3528..=3589).contains(&prefix(4))
        || (300..=305).contains(&prefix(3))
}

/// The Luhn (mod 10) checksum of a digit string.
#[must_use]
pub fn luhn(number: &str) -> bool {
    !number.is_empty() && luhn_digits(number.bytes().filter(u8::is_ascii_digit).map(|b| b - b'0'))
}

/// The Luhn checksum of digit values, most significant first.
fn luhn_digits(digits: impl DoubleEndedIterator<Item = u8>) -> bool {
    let mut sum = 0u32;
    for (index, digit) in digits.rev().enumerate() {
        let mut value = u32::from(digit);
        if index % 2 == 1 {
            value *= 2;
            if value > 9 {
                value -= 9;
            }
        }
        sum += value;
    }
    sum.is_multiple_of(10)
}

/// Three consecutive dash-separated groups of the run are a valid `AAA-GG-SSSS`.
fn accept_ssn_run(run: &str) -> bool {
    let groups = groups(run);
    groups.windows(3).any(|w| {
        let [(_, area), (sep1, group), (sep2, serial)] = w else {
            return false;
        };
        *sep1 == Some('-')
            && *sep2 == Some('-')
            && area.len() == 3
            && group.len() == 2
            && serial.len() == 4
            && *area != "000"
            && *area != "666"
            && !area.starts_with('9')
            && *group != "00"
            && *serial != "0000"
    })
}

/// ISO 13616 length and ISO 7064 mod-97-10 checksum.
fn accept_iban(candidate: &str) -> bool {
    let compact: Vec<u8> = candidate.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder = 0u32;
    for &byte in tail.iter().chain(head) {
        let value = match byte {
            b'0'..=b'9' => u32::from(byte - b'0'),
            b'A'..=b'Z' => u32::from(byte - b'A') + 10,
            _ => return false,
        };
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

fn accept_mixed_secret(value: &str) -> bool {
    value.bytes().any(|b| b.is_ascii_digit()) && value.bytes().any(|b| b.is_ascii_alphabetic())
}

fn accept_password(value: &str) -> bool {
    !value
        .bytes()
        .all(|b| b == b'*' || b == b'x' || b == b'X' || b == b'.')
}

/// The flags of `policy` found in `text`, added to `found`.
fn scan_text(text: &str, policy: &ResolvedPolicy, found: &mut BTreeSet<SafetyFlag>) {
    for detector in DETECTORS.iter() {
        if found.contains(&detector.flag) || !policy.flags.contains(&detector.flag) {
            continue;
        }
        let hit = detector.regex.captures_iter(text).any(|captures| {
            captures
                .get(1)
                .or_else(|| captures.get(0))
                .is_some_and(|m| (detector.accept)(m.as_str()))
        });
        if hit {
            found.insert(detector.flag);
        }
    }
}

/// `text` with every finding of the safety detectors (all of [`SafetyFlag::ALL`]) replaced by
/// `[REDACTED:{flag}]`, and the flags found, sorted. Overlapping findings are replaced once, as
/// one span. Used for what leaves the node (shared trajectories, spec §9.3).
#[must_use]
pub fn redact_text(text: &str) -> (String, Vec<SafetyFlag>) {
    let mut spans: Vec<(usize, usize, SafetyFlag)> = Vec::new();
    for detector in DETECTORS.iter() {
        for captures in detector.regex.captures_iter(text) {
            if let Some(m) = captures.get(1).or_else(|| captures.get(0))
                && (detector.accept)(m.as_str())
            {
                spans.push((m.start(), m.end(), detector.flag));
            }
        }
    }
    if spans.is_empty() {
        return (text.to_owned(), Vec::new());
    }
    spans.sort_unstable();
    let mut flags = BTreeSet::new();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut i = 0;
    while i < spans.len() {
        let (start, mut end, flag) = spans[i];
        flags.insert(flag);
        let mut j = i + 1;
        while j < spans.len() && spans[j].0 < end {
            end = end.max(spans[j].1);
            flags.insert(spans[j].2);
            j += 1;
        }
        if start >= at {
            out.push_str(&text[at..start]);
            out.push_str("[REDACTED:");
            out.push_str(flag.as_str());
            out.push(']');
            at = end;
        }
        i = j;
    }
    out.push_str(&text[at..]);
    (out, flags.into_iter().collect())
}

/// [`redact_text`] over every string and number of `value` (a number that is a finding becomes
/// the redaction text); the flags found, sorted and without repeats, are added to `flags`.
#[must_use]
pub fn redact_value(value: &Value, flags: &mut BTreeSet<SafetyFlag>) -> Value {
    match value {
        Value::String(text) => {
            let (clean, found) = redact_text(text);
            flags.extend(found);
            Value::String(clean)
        }
        Value::Number(n) => {
            let text = n.to_string();
            let (clean, found) = redact_text(&text);
            if found.is_empty() {
                value.clone()
            } else {
                flags.extend(found);
                Value::String(clean)
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| redact_value(v, flags)).collect()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), redact_value(v, flags)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) => value.clone(),
    }
}

/// Collects every string, object key and number in `content`; `false` once more than `budget`
/// bytes would be collected.
fn collect_texts<'a>(content: &'a Value, out: &mut Vec<Cow<'a, str>>, budget: &mut usize) -> bool {
    fn push<'a>(text: Cow<'a, str>, out: &mut Vec<Cow<'a, str>>, budget: &mut usize) -> bool {
        if text.len() > *budget {
            return false;
        }
        *budget -= text.len();
        out.push(text);
        true
    }
    match content {
        Value::String(text) => push(Cow::Borrowed(text), out, budget),
        Value::Number(number) => push(Cow::Owned(number.to_string()), out, budget),
        Value::Array(items) => items.iter().all(|item| collect_texts(item, out, budget)),
        Value::Object(members) => members.iter().all(|(key, value)| {
            push(Cow::Borrowed(key), out, budget) && collect_texts(value, out, budget)
        }),
        Value::Null | Value::Bool(_) => true,
    }
}

/// `guard.checkSafety` without enforcement: the sorted flags of `policy` found in `content`.
///
/// # Errors
///
/// −32602 when `content` holds more than `max_bytes` of text.
pub fn check_safety(
    content: &Value,
    policy: &ResolvedPolicy,
    max_bytes: usize,
) -> Result<Vec<SafetyFlag>, RpcError> {
    let mut texts = Vec::new();
    let mut budget = max_bytes;
    if !collect_texts(content, &mut texts, &mut budget) {
        return Err(invalid_params(
            format!("content: more than {max_bytes} bytes of text"),
            Some("content"),
        ));
    }
    let mut found = BTreeSet::new();
    for text in &texts {
        scan_text(text, policy, &mut found);
    }
    Ok(found.into_iter().collect())
}

/// `guard.checkSafety` with content of at most `max_bytes` of text.
///
/// # Errors
///
/// −32602 for an unknown selector or oversized content; −32004 when the policy enforces and
/// something is found.
pub fn check_safety_call(
    params: &CheckSafetyParams,
    max_bytes: usize,
) -> Result<CheckSafetyResult, RpcError> {
    let policy = ResolvedPolicy::from_param(params.policy.as_ref())?;
    let flags: Vec<String> = check_safety(&params.content, &policy, max_bytes)?
        .into_iter()
        .map(|flag| flag.as_str().to_owned())
        .collect();
    if flags.is_empty() {
        return Ok(CheckSafetyResult {
            safe: true,
            flags: None,
        });
    }
    if policy.enforce {
        return Err(RpcError::safety_violation().with_data(json!({ "flags": flags })));
    }
    Ok(CheckSafetyResult {
        safe: false,
        flags: Some(flags),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_detector_compiles() {
        assert_eq!(DETECTORS.len(), DETECTOR_PATTERNS.len());
    }

    #[test]
    fn luhn_and_iban_checksums() {
        assert!(luhn("4111111111111111"));
        assert!(!luhn("4111111111111112"));
        assert!(accept_iban("DE89 3704 0044 0532 0130 00"));
        assert!(accept_iban("GB82WEST12345698765432"));
        assert!(!accept_iban("GB82WEST12345698765433"));
    }

    #[test]
    fn groups_keep_their_separators() {
        assert_eq!(
            groups("123-45 6789"),
            vec![(None, "123"), (Some('-'), "45"), (Some(' '), "6789")]
        );
    }

    #[test]
    fn card_runs_are_scanned_in_linear_time() {
        // 200,000 one-digit groups: joined from every start to the end, this took minutes.
        // Seventeen 4s pass the Luhn check, so a run of 4s is a card; a run of 1s is not, and
        // every start of a run of 5s (Mastercard's 55) is tried at every length from 13 to 19
        // without passing it: the worst case.
        for (digit, card) in [("1", false), ("4", true), ("5", false)] {
            let run = format!("{digit} ").repeat(200_000);
            assert_eq!(accept_card_run(&run), card);
            let flags = check_safety(&json!(run), &ResolvedPolicy::default(), 2 << 20).unwrap();
            assert_eq!(flags.contains(&SafetyFlag::PiiCreditCard), card);
        }
        // Still found at the end of a long run.
        let tail = format!("{}4111 1111 1111 1111", "1 ".repeat(1000));
        assert!(accept_card_run(&tail));
    }

    #[test]
    fn redaction_replaces_every_finding_and_keeps_the_rest() {
        let (clean, flags) = redact_text(
            "mail ana@agents.localhost, key sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD, card 4111 1111 1111 1111.",
        );
        assert_eq!(
            clean,
            "mail [REDACTED:pii.email], key [REDACTED:secret.api_key], card [REDACTED:pii.credit_card]."
        );
        assert_eq!(
            flags,
            vec![
                SafetyFlag::PiiEmail,
                SafetyFlag::PiiCreditCard,
                SafetyFlag::SecretApiKey
            ]
        );
        assert_eq!(redact_text("nothing here"), ("nothing here".into(), vec![]));
        let mut found = BTreeSet::new();
        let v = redact_value(
            &json!({"to": ["x@mail.localhost"], "n": 4_111_111_111_111_111_u64, "ok": 3}),
            &mut found,
        );
        assert_eq!(
            v,
            json!({"to": ["[REDACTED:pii.email]"], "n": "[REDACTED:pii.credit_card]", "ok": 3})
        );
        assert_eq!(found.len(), 2);
    }
}
