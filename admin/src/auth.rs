//! Bearer tokens: their configuration ([`AdminConfig`], [`Token`]), and the [`Caller`] every
//! endpoint authenticates as.

use std::fmt;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::limits::Limits;
use crate::AppState;

/// The shortest secret a [`Token`] accepts, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every `GET` endpoint.
    Read,
    /// Every endpoint: reads and the mutations (cancel, resume, replay, pause, resume a queue).
    Write,
}

impl Scope {
    /// `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
        }
    }
}

/// One bearer token the API accepts.
///
/// The `name` is who the audit log records; the `secret` is what a client sends
/// (`Authorization: Bearer <secret>`). A token bound to an `owner` sees and manages only the
/// tasks of that owner ([`Task::owner`](taskgate::Task::owner)): another owner's task is a
/// 404, as if it did not exist, and the queue, stats and audit endpoints answer 403.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    name: String,
    secret: String,
    scope: Scope,
    owner: Option<String>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("secret", &"<redacted>")
            .field("scope", &self.scope)
            .field("owner", &self.owner)
            .finish()
    }
}

/// Why a token's configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The name is empty, longer than 255 bytes, or has characters other than ASCII letters,
    /// digits, `-`, `_` and `.`.
    #[error("token name {0:?}: use 1 to 255 ASCII letters, digits, '-', '_' or '.'")]
    BadName(String),
    /// The secret is shorter than [`MIN_SECRET_BYTES`], or has whitespace or control
    /// characters.
    #[error(
        "token {name:?}: the secret must be at least {MIN_SECRET_BYTES} bytes without whitespace"
    )]
    WeakSecret {
        /// The token's name.
        name: String,
    },
    /// The owner is empty.
    #[error("token {name:?}: an owner binding must not be empty")]
    EmptyOwner {
        /// The token's name.
        name: String,
    },
    /// The text form is not `NAME:SCOPE[@OWNER]=SECRET`. The spec is not kept: it may hold a
    /// secret, or part of one.
    #[error(
        "token spec{}: expected NAME:read|write[@OWNER]=SECRET (the spec is not shown: it may \
         hold a secret)",
        .position.map(|p| format!(" {p}")).unwrap_or_default()
    )]
    BadSpec {
        /// Which spec of a list ([`AdminConfig::from_specs`]), from 1.
        position: Option<usize>,
    },
    /// Two tokens share a name or a secret.
    #[error("token {0:?}: a name and a secret may be configured only once")]
    Duplicate(String),
}

impl Token {
    /// A token named `name` (who the audit log records) with `secret` and `scope`.
    pub fn new(
        name: impl Into<String>,
        secret: impl Into<String>,
        scope: Scope,
    ) -> Result<Token, TokenError> {
        let (name, secret) = (name.into(), secret.into());
        let name_ok = !name.is_empty()
            && name.len() <= 255
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
            return Err(TokenError::BadName(name));
        }
        let secret_ok = secret.len() >= MIN_SECRET_BYTES
            && !secret.chars().any(|c| c.is_whitespace() || c.is_control());
        if !secret_ok {
            return Err(TokenError::WeakSecret { name });
        }
        Ok(Token { name, secret, scope, owner: None })
    }

    /// Binds the token to `owner`: it sees and manages only that owner's tasks.
    pub fn for_owner(mut self, owner: impl Into<String>) -> Result<Token, TokenError> {
        let owner = owner.into();
        if owner.is_empty() {
            return Err(TokenError::EmptyOwner { name: self.name });
        }
        self.owner = Some(owner);
        Ok(self)
    }

    /// Parses the text form `NAME:SCOPE[@OWNER]=SECRET` (for flags and environment
    /// variables), e.g. `ops:write=9f2c…` or `billing-ui:read@billing=4ab1…`.
    ///
    /// ```
    /// use taskgate_admin::{Scope, Token};
    ///
    /// let token = Token::parse("billing-ui:read@billing=0123456789abcdef").unwrap();
    /// assert_eq!((token.name(), token.scope(), token.owner()), ("billing-ui", Scope::Read, Some("billing")));
    /// assert!(Token::parse("ops:admin=0123456789abcdef").is_err());
    /// ```
    pub fn parse(spec: &str) -> Result<Token, TokenError> {
        let bad = || TokenError::BadSpec { position: None };
        let (head, secret) = spec.split_once('=').ok_or_else(bad)?;
        let (name, rest) = head.split_once(':').ok_or_else(bad)?;
        let (scope, owner) = match rest.split_once('@') {
            Some((scope, owner)) => (scope, Some(owner)),
            None => (rest, None),
        };
        let scope = match scope {
            "read" => Scope::Read,
            "write" => Scope::Write,
            _ => return Err(bad()),
        };
        let token = Token::new(name, secret, scope)?;
        match owner {
            Some(owner) => token.for_owner(owner),
            None => Ok(token),
        }
    }

    /// Who the audit log records.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the token may do.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The owner the token is bound to, if any.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

/// Splits a list of token specs, as `TASKGATE_ADMIN_TOKENS` holds them: the specs are
/// separated by commas, but only by a comma followed by the next spec's `NAME:` (a token name,
/// then `:`); any other comma is part of the secret before it. Commas and whitespace at the
/// end of the list, and blank specs, are dropped.
///
/// ```
/// use taskgate_admin::split_token_list;
///
/// let list = "ops:write=with,a-comma-0123456789,dash:read@billing=0123456789abcdef,";
/// assert_eq!(
///     split_token_list(list),
///     ["ops:write=with,a-comma-0123456789", "dash:read@billing=0123456789abcdef"]
/// );
/// ```
pub fn split_token_list(list: &str) -> Vec<&str> {
    let list = list.trim_end_matches(|c: char| c == ',' || c.is_whitespace());
    let mut specs = Vec::new();
    let mut start = 0;
    for (comma, _) in list.match_indices(',') {
        if comma >= start && starts_with_name(&list[comma + 1..]) {
            specs.push(&list[start..comma]);
            start = comma + 1;
        }
    }
    specs.push(&list[start..]);
    specs.retain(|spec| !spec.trim_matches(|c: char| c == ',' || c.is_whitespace()).is_empty());
    specs
}

/// True when `text` starts with a token name and `:`.
fn starts_with_name(text: &str) -> bool {
    let name = text.bytes().take_while(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b)).count();
    name > 0 && text.as_bytes().get(name) == Some(&b':')
}

/// The admin API's configuration: the tokens it accepts.
///
/// ```
/// use taskgate_admin::{AdminConfig, Scope, Token};
///
/// let config = AdminConfig::new()
///     .with_token(Token::new("ops", "a-long-random-secret", Scope::Write)?)?
///     .with_token(Token::parse("dash:read=another-long-secret")?)?;
/// assert_eq!(config.tokens().len(), 2);
/// # Ok::<(), taskgate_admin::TokenError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct AdminConfig {
    tokens: Vec<Token>,
    pub(crate) limits: Limits,
}

impl AdminConfig {
    /// A configuration with no tokens: every request is refused with 401 until one is added.
    /// The connection limits are the defaults ([`Limits`]).
    pub fn new() -> AdminConfig {
        AdminConfig::default()
    }

    /// Sets the limits slow or many clients meet ([`Limits`]).
    pub fn with_limits(mut self, limits: Limits) -> AdminConfig {
        self.limits = limits;
        self
    }

    /// The limits slow or many clients meet.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Adds a token. Names and secrets must be unique.
    pub fn with_token(mut self, token: Token) -> Result<AdminConfig, TokenError> {
        let clash = self.tokens.iter().any(|t| t.name == token.name || t.secret == token.secret);
        if clash {
            return Err(TokenError::Duplicate(token.name));
        }
        self.tokens.push(token);
        Ok(self)
    }

    /// A configuration from text specs ([`Token::parse`]), e.g. flags, or an environment
    /// variable split with [`split_token_list`]. A spec that does not parse is named by its
    /// position in `specs` (from 1), never by its text.
    pub fn from_specs<'a>(
        specs: impl IntoIterator<Item = &'a str>,
    ) -> Result<AdminConfig, TokenError> {
        specs.into_iter().enumerate().try_fold(AdminConfig::new(), |c, (i, spec)| {
            let token = Token::parse(spec).map_err(|e| match e {
                TokenError::BadSpec { position: None } => {
                    TokenError::BadSpec { position: Some(i + 1) }
                }
                other => other,
            })?;
            c.with_token(token)
        })
    }

    /// The configured tokens.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// The token whose secret is `presented`. Every configured secret is compared, each in
    /// constant time (the comparison does not stop at the first differing byte, and the loop
    /// does not stop at a match), so timing tells nothing about how much of a secret matched.
    fn find(&self, presented: &[u8]) -> Option<&Token> {
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.secret.as_bytes().ct_eq(presented)) {
                found = Some(token);
            }
        }
        found
    }
}

/// The authenticated caller of one request.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) name: String,
    pub(crate) scope: Scope,
    pub(crate) owner: Option<String>,
}

impl Caller {
    /// Refuses a read-only token (403).
    pub(crate) fn require_write(&self) -> Result<(), ApiError> {
        match self.scope {
            Scope::Write => Ok(()),
            Scope::Read => Err(ApiError::forbidden(format!(
                "token {:?} has read scope; this endpoint needs write",
                self.name
            ))),
        }
    }

    /// Refuses an owner-bound token (403): the endpoint spans every owner's tasks.
    pub(crate) fn require_unbound(&self) -> Result<(), ApiError> {
        match &self.owner {
            None => Ok(()),
            Some(owner) => Err(ApiError::forbidden(format!(
                "token {:?} is bound to owner {owner:?}; this endpoint spans every owner",
                self.name
            ))),
        }
    }

    /// True when the caller may see `task` (unbound, or bound to its owner).
    pub(crate) fn sees(&self, task: &taskgate::Task) -> bool {
        self.owner.as_deref().is_none_or(|owner| owner == task.owner)
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, ApiError> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("auth.missing", "no Authorization header"))?;
        let presented = bearer(header.as_bytes())
            .ok_or_else(|| ApiError::unauthorized("auth.invalid", "expected a Bearer token"))?;
        let token = state
            .config
            .find(presented)
            .ok_or_else(|| ApiError::unauthorized("auth.invalid", "unknown token"))?;
        Ok(Caller { name: token.name.clone(), scope: token.scope, owner: token.owner.clone() })
    }
}

/// The credentials of an `Authorization: Bearer <secret>` value. The scheme is
/// case-insensitive and followed by one or more spaces (RFC 7235 §2.1, RFC 6750 §2.1).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|b| *b != b' ')?;
    Some(&rest[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_name_the_problem() {
        let t = Token::parse("ops:write=0123456789abcdef").unwrap();
        assert_eq!((t.name(), t.scope(), t.owner()), ("ops", Scope::Write, None));
        for bad in ["ops=0123456789abcdef", "ops:root=0123456789abcdef", "ops:write"] {
            assert!(
                matches!(Token::parse(bad), Err(TokenError::BadSpec { position: None })),
                "{bad}"
            );
        }
        assert!(matches!(Token::parse("ops:write=short"), Err(TokenError::WeakSecret { .. })));
        assert!(matches!(Token::parse("o p:write=0123456789abcdef"), Err(TokenError::BadName(_))));
        assert!(matches!(
            Token::parse("ops:read@=0123456789abcdef"),
            Err(TokenError::EmptyOwner { .. })
        ));
        let err = Token::parse("ops:root=0123456789abcdef").unwrap_err().to_string();
        assert!(!err.contains("0123456789abcdef"), "errors never print a secret: {err}");
        let dup = AdminConfig::from_specs(["a:read=0123456789abcdef", "b:write=0123456789abcdef"]);
        assert!(matches!(dup, Err(TokenError::Duplicate(name)) if name == "b"));
        assert!(!format!("{t:?}").contains("0123456789abcdef"), "Debug redacts the secret");
    }

    #[test]
    fn lists_split_only_before_a_name_and_errors_never_show_a_spec() {
        assert_eq!(split_token_list("a:read=x,b:write=y"), ["a:read=x", "b:write=y"]);
        assert_eq!(split_token_list("a:read=x,y,z=w,"), ["a:read=x,y,z=w"]);
        assert_eq!(split_token_list(",,a:read=x,,b:read@o,p=y"), ["a:read=x,", "b:read@o,p=y"]);
        assert_eq!(split_token_list(" , "), Vec::<&str>::new());
        assert_eq!(split_token_list(""), Vec::<&str>::new());
        let list = "ops:write=first-0123456789abcdef,dash:raed=s3cr3t-TAIL-0123456789";
        let err = AdminConfig::from_specs(split_token_list(list)).unwrap_err();
        assert_eq!(err, TokenError::BadSpec { position: Some(2) });
        let text = err.to_string();
        for part in ["s3cr3t", "TAIL", "first", "dash", "raed"] {
            assert!(!text.contains(part), "{text}");
        }
        let err = AdminConfig::from_specs(["no-equals-sign-s3cr3t"]).unwrap_err().to_string();
        assert!(!err.contains("s3cr3t"), "{err}");
    }

    #[test]
    fn accessors_debug_and_configuration_say_what_they_hold() {
        let t = Token::parse("billing-ui:read@billing=0123456789abcdef").unwrap();
        assert_eq!((t.name(), t.scope(), t.owner()), ("billing-ui", Scope::Read, Some("billing")));
        assert_eq!((Scope::Read.as_str(), Scope::Write.as_str()), ("read", "write"));
        let debug = format!("{t:?}");
        for part in ["billing-ui", "<redacted>", "Read", "billing"] {
            assert!(debug.contains(part), "{part} in {debug}");
        }
        let limits =
            Limits { header_timeout: std::time::Duration::from_secs(3), ..Limits::default() };
        let config =
            AdminConfig::from_specs(["a:read=0123456789abcdef", "b:write=fedcba9876543210"])
                .unwrap()
                .with_limits(limits.clone());
        assert_eq!(config.limits(), &limits);
        assert_eq!(config.tokens().iter().map(Token::name).collect::<Vec<_>>(), ["a", "b"]);
        let same_name =
            AdminConfig::from_specs(["a:read=0123456789abcdef", "a:write=fedcba9876543210"]);
        assert!(matches!(same_name, Err(TokenError::Duplicate(name)) if name == "a"));
        // A comma before a bare `:` does not start a spec: a name has at least one character.
        assert_eq!(split_token_list("a:read=x,:y"), ["a:read=x,:y"]);
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR   s3cret"] {
            assert_eq!(bearer(value.as_bytes()), Some(&b"s3cret"[..]), "{value}");
        }
        for value in ["Basic s3cret", "Bearers3cret", "Bearer", "Bearer ", "Bearer2 s3cret", ""] {
            assert_eq!(bearer(value.as_bytes()), None, "{value}");
        }
    }

    #[test]
    fn find_matches_only_the_exact_secret() {
        let config =
            AdminConfig::from_specs(["a:read=0123456789abcdef", "b:write=fedcba9876543210"])
                .unwrap();
        assert_eq!(config.find(b"fedcba9876543210").map(Token::name), Some("b"));
        for wrong in [&b"0123456789abcde"[..], b"0123456789abcdefX", b"", b"0123456789ABCDEF"] {
            assert!(config.find(wrong).is_none(), "{wrong:?}");
        }
    }
}
