//! Who may do what: a request's bearer token becomes an [`Access`] — everything (the one
//! `server.token`, or no token configured at all) or some scopes (`server.tokens`: name
//! patterns, `*` matching any run of characters), read-only or read-write. Every route
//! asks it before it touches a scope; lists keep only what it may see. Nothing here knows
//! HTTP beyond the `Authorization` header's value, so another transport (MCP over HTTP)
//! can use it as it is.

use crate::config::{AccessLevel, ServerConfig};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What one caller may do.
#[derive(Clone, Debug)]
pub struct Access(Kind);

#[derive(Clone, Debug)]
enum Kind {
    Full,
    Scoped {
        patterns: Arc<[String]>,
        write: bool,
    },
}

impl Access {
    /// Every scope, read and write.
    pub fn full() -> Access {
        Access(Kind::Full)
    }

    /// The scopes matching any of `patterns`, read-only or read-write.
    pub fn scoped(patterns: &[String], level: AccessLevel) -> Access {
        Access(Kind::Scoped {
            patterns: patterns.into(),
            write: level == AccessLevel::Write,
        })
    }

    /// Every scope, read and write (what no token configured gives too).
    pub fn is_full(&self) -> bool {
        matches!(self.0, Kind::Full)
    }

    pub fn can_read(&self, scope: &str) -> bool {
        match &self.0 {
            Kind::Full => true,
            Kind::Scoped { patterns, .. } => patterns.iter().any(|p| glob(p, scope)),
        }
    }

    pub fn can_write(&self, scope: &str) -> bool {
        match &self.0 {
            Kind::Full => true,
            Kind::Scoped { write, .. } => *write && self.can_read(scope),
        }
    }

    /// The scopes of `scopes` this caller may read, in their order.
    pub fn visible(&self, scopes: impl IntoIterator<Item = String>) -> Vec<String> {
        scopes.into_iter().filter(|s| self.can_read(s)).collect()
    }
}

/// The configured tokens.
pub struct Tokens {
    full: String,
    scoped: Vec<(String, Access)>,
}

impl Tokens {
    pub fn new(cfg: &ServerConfig) -> Tokens {
        Tokens {
            full: cfg.token.clone(),
            scoped: cfg
                .tokens
                .iter()
                .map(|g| (g.token.clone(), Access::scoped(&g.scopes, g.access)))
                .collect(),
        }
    }

    /// No token is configured: every caller has full access.
    pub fn open(&self) -> bool {
        self.full.is_empty() && self.scoped.is_empty()
    }

    /// The access an `Authorization` header value gives: `None` when tokens are
    /// configured and it carries none of them. Every configured token is compared, in
    /// constant time, whichever matches.
    pub fn access(&self, authorization: Option<&str>) -> Option<Access> {
        if self.open() {
            return Some(Access::full());
        }
        let given = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .as_bytes();
        let mut found = None;
        if !self.full.is_empty() && bool::from(given.ct_eq(self.full.as_bytes())) {
            found = Some(Access::full());
        }
        for (token, access) in &self.scoped {
            if bool::from(given.ct_eq(token.as_bytes())) {
                found = Some(access.clone());
            }
        }
        found
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters
/// (none included) and every other character for itself.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it now covers up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            // Let the last `*` take one more character and retry from there.
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenGrant;

    #[test]
    fn globs_match_runs_of_characters() {
        for (p, n, want) in [
            ("team-a-*", "team-a-1", true),
            ("team-a-*", "team-a-", true),
            ("team-a-*", "team-b-1", false),
            ("team-a-*", "xteam-a-1", false),
            ("debate-42", "debate-42", true),
            ("debate-42", "debate-421", false),
            ("*", "anything", true),
            ("*-42", "debate-42", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("a*a", "a", false),
            ("a**", "a", true),
            ("ctx_*", "ctx_0123abcd", true),
            ("é*", "été", true),
        ] {
            assert_eq!(glob(p, n), want, "{p} vs {n}");
        }
    }

    #[test]
    fn tokens_give_their_access_and_nothing_else() {
        let mut cfg = ServerConfig {
            token: "admin".into(),
            ..Default::default()
        };
        cfg.tokens = vec![
            TokenGrant {
                token: "reader".into(),
                scopes: vec!["team-a-*".into(), "debate-42".into()],
                access: AccessLevel::Read,
            },
            TokenGrant {
                token: "writer".into(),
                scopes: vec!["team-b-*".into()],
                access: AccessLevel::Write,
            },
        ];
        let t = Tokens::new(&cfg);
        assert!(!t.open());
        assert!(t.access(None).is_none());
        assert!(t.access(Some("Bearer nope")).is_none());
        assert!(t.access(Some("admin")).is_none(), "no Bearer prefix");
        assert!(t.access(Some("Bearer admin")).unwrap().is_full());
        let r = t.access(Some("Bearer reader")).unwrap();
        assert!(r.can_read("team-a-1") && r.can_read("debate-42"));
        assert!(!r.can_write("team-a-1"));
        assert!(!r.can_read("team-b-1") && !r.can_read("debate-4"));
        let w = t.access(Some("Bearer writer")).unwrap();
        assert!(w.can_write("team-b-x") && !w.can_write("team-a-1"));
        assert_eq!(
            r.visible(["team-b-1", "team-a-2", "debate-42", "other"].map(String::from)),
            ["team-a-2", "debate-42"]
        );
        let open = Tokens::new(&ServerConfig::default());
        assert!(open.open() && open.access(None).unwrap().is_full());
        // Scoped tokens alone: no token, no access.
        cfg.token.clear();
        assert!(Tokens::new(&cfg).access(None).is_none());
    }
}
