//! Who a jetcron process is to NATS, and how it proves it.
//!
//! Each service connects as the user of its role (`infra/nats/roles.conf`,
//! `docs/security.md`), so the server, not jetcron, decides what it may
//! publish and subscribe to. [`NatsAuthOptions`] is what the command line
//! says; [`NatsAuthOptions::connect_options`] turns it into async-nats'
//! [`ConnectOptions`] with async-nats' own builders, after refusing what the
//! server would refuse later or, worse, silently ignore: a password without a
//! user, two ways of authenticating at once, a client certificate without its
//! key. Every file is read here, up front, so a wrong path is named once at
//! start instead of failing in a connect retry loop. A CA or client
//! certificate makes TLS required: a process told how to check the server
//! must never fall back to plain text.
//!
//! Where the servers are is [`ServerList`]: the comma-separated list that
//! `--nats-url` takes, as the `nats` CLI and the other NATS tools do. The
//! client tries every server of the list in turn (and learns the rest of a
//! cluster from the first one that answers), so a list whose first server is
//! down connects through the next, and a connection that breaks moves on to
//! any live node.

use std::fmt;
use std::path::{Path, PathBuf};

use async_nats::{ConnectOptions, ServerAddr};

/// A NATS connection whose I/O runs on a thread of its own, and that
/// thread's runtime, for tasks that must keep going while the process's
/// workers are busy (an executor's target calls, a ticker's lease rounds).
#[derive(Debug, Clone)]
pub struct OwnThreadConnection {
    pub client: async_nats::Client,
    pub runtime: tokio::runtime::Handle,
    /// Where the connection goes, and what its watch hears.
    pub failover: crate::nats_failover::Failover,
}

/// The NATS servers a process connects to, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerList(Vec<ServerAddr>);

/// Why a `--nats-url` value is not a server list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ServerListError {
    #[error("no NATS server given (--nats-url / JETCRON_NATS_URL is empty)")]
    Empty,
    #[error("NATS server {position} of the list, {url:?}, is not a server URL: {reason}")]
    Invalid {
        position: usize,
        url: String,
        reason: String,
    },
}

impl ServerList {
    /// Parse `nats://a:4222,nats://b:4222` (spaces around commas allowed,
    /// empty items refused, `host:port` taken as `nats://host:port`).
    pub fn parse(text: &str) -> Result<Self, ServerListError> {
        let items: Vec<&str> = text.split(',').map(str::trim).collect();
        if items.iter().all(|item| item.is_empty()) {
            return Err(ServerListError::Empty);
        }
        let mut servers = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let invalid = |reason: String| ServerListError::Invalid {
                position: index + 1,
                url: item.to_string(),
                reason,
            };
            if item.is_empty() {
                return Err(invalid("empty (a stray comma?)".into()));
            }
            let addr: ServerAddr = item
                .parse()
                .map_err(|e: std::io::Error| invalid(e.to_string()))?;
            if !matches!(addr.scheme(), "nats" | "tls" | "ws" | "wss") {
                return Err(invalid(format!(
                    "scheme {:?} (use nats://, tls://, ws:// or wss://)",
                    addr.scheme()
                )));
            }
            servers.push(addr);
        }
        Ok(Self(servers))
    }

    pub fn servers(&self) -> &[ServerAddr] {
        &self.0
    }

    /// How many servers the list names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The list as given (without credentials that a URL may carry).
impl fmt::Display for ServerList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, server) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(
                f,
                "{}://{}:{}",
                server.scheme(),
                server.host(),
                server.port()
            )?;
        }
        Ok(())
    }
}

/// How to authenticate to NATS and whether (and how) to use TLS.
///
/// At most one way to authenticate: user and password, a token, a creds file
/// (JWT + nkey seed, operator mode) or an nkey seed file. None means an
/// anonymous connection, which a server with `roles.conf` refuses.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NatsAuthOptions {
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// A `.creds` file (user JWT and nkey seed), as `nsc` writes them.
    pub creds_file: Option<PathBuf>,
    /// A file holding a user nkey seed (`SU…`), for `nkey:` users of the server config.
    pub nkey_seed_file: Option<PathBuf>,
    /// PEM file of the CA(s) that signed the server certificate (instead of the system roots).
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers that verify clients (`tls { verify: true }`).
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of [`Self::tls_cert_file`].
    pub tls_key_file: Option<PathBuf>,
    /// Refuse to connect without TLS (implied by a CA or client certificate).
    pub require_tls: bool,
}

/// Why the options cannot make a connection.
#[derive(Debug, thiserror::Error)]
pub enum NatsAuthError {
    #[error("a NATS password needs a user (--nats-user)")]
    PasswordWithoutUser,
    #[error("NATS user {0:?} needs a password (--nats-password)")]
    UserWithoutPassword(String),
    #[error("choose one way to authenticate to NATS, not {}", .0.join(" and "))]
    SeveralMethods(Vec<&'static str>),
    #[error("a TLS client certificate needs its private key (--nats-tls-key)")]
    CertWithoutKey,
    #[error("a TLS private key needs its client certificate (--nats-tls-cert)")]
    KeyWithoutCert,
    #[error("{what} {}: {source}", path.display())]
    Unreadable {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {} {problem}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        problem: String,
    },
}

impl NatsAuthOptions {
    /// The async-nats options these settings describe, files read and checked.
    pub fn connect_options(&self) -> Result<ConnectOptions, NatsAuthError> {
        choose_tls_provider();
        let methods = self.methods();
        if methods.len() > 1 {
            return Err(NatsAuthError::SeveralMethods(methods));
        }
        let mut options = ConnectOptions::new();
        match (&self.user, &self.password) {
            (None, Some(_)) => return Err(NatsAuthError::PasswordWithoutUser),
            (Some(user), None) => return Err(NatsAuthError::UserWithoutPassword(user.clone())),
            (Some(user), Some(password)) => {
                options = options.user_and_password(user.clone(), password.clone());
            }
            (None, None) => {}
        }
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        if let Some(path) = &self.creds_file {
            // Read here rather than with `credentials_file`, so that a bad file is named.
            let text = read("creds file", path)?;
            options = options
                .credentials(&text)
                .map_err(|e| invalid("creds file", path, e.to_string()))?;
        }
        if let Some(path) = &self.nkey_seed_file {
            let seed = read("nkey seed file", path)?.trim().to_string();
            if !seed.starts_with("SU") {
                return Err(invalid(
                    "nkey seed file",
                    path,
                    "does not hold a user nkey seed (one line starting with SU)".into(),
                ));
            }
            options = options.nkey(seed);
        }
        if let Some(path) = &self.tls_ca_file {
            expect_pem("TLS CA file", path, "CERTIFICATE")?;
            options = options.add_root_certificates(path.clone());
        }
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(_), None) => return Err(NatsAuthError::CertWithoutKey),
            (None, Some(_)) => return Err(NatsAuthError::KeyWithoutCert),
            (Some(cert), Some(key)) => {
                expect_pem("TLS client certificate", cert, "CERTIFICATE")?;
                expect_pem("TLS client key", key, "PRIVATE KEY")?;
                options = options.add_client_certificate(cert.clone(), key.clone());
            }
            (None, None) => {}
        }
        Ok(options.require_tls(self.tls_required()))
    }

    /// Whether connections must use TLS.
    pub fn tls_required(&self) -> bool {
        self.require_tls || self.tls_ca_file.is_some() || self.tls_cert_file.is_some()
    }

    /// How this process authenticates, for logs (never a secret).
    pub fn describe(&self) -> String {
        let who = if let Some(user) = &self.user {
            format!("user {user:?}")
        } else if self.token.is_some() {
            "a token".to_string()
        } else if let Some(path) = &self.creds_file {
            format!("creds file {}", path.display())
        } else if let Some(path) = &self.nkey_seed_file {
            format!("nkey seed file {}", path.display())
        } else {
            "no credentials".to_string()
        };
        if self.tls_required() {
            format!("{who}, TLS")
        } else {
            who
        }
    }

    fn methods(&self) -> Vec<&'static str> {
        [
            (
                self.user.is_some() || self.password.is_some(),
                "user/password",
            ),
            (self.token.is_some(), "token"),
            (self.creds_file.is_some(), "creds file"),
            (self.nkey_seed_file.is_some(), "nkey seed file"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect()
    }
}

/// Secrets stay out of logs and panic messages.
impl fmt::Debug for NatsAuthOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "<hidden>");
        f.debug_struct("NatsAuthOptions")
            .field("user", &self.user)
            .field("password", &hidden(&self.password))
            .field("token", &hidden(&self.token))
            .field("creds_file", &self.creds_file)
            .field("nkey_seed_file", &self.nkey_seed_file)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .field("require_tls", &self.require_tls)
            .finish()
    }
}

/// async-nats builds its TLS configuration on rustls' process-wide default
/// crypto provider. This workspace compiles two into rustls (ring for
/// async-nats, aws-lc-rs for the HTTP clients), so rustls cannot pick one and
/// would panic at the first TLS connection to NATS: install ring, the one
/// async-nats is built with, unless the process already chose.
fn choose_tls_provider() {
    let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
}

fn read(what: &'static str, path: &Path) -> Result<String, NatsAuthError> {
    std::fs::read_to_string(path).map_err(|source| NatsAuthError::Unreadable {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn invalid(what: &'static str, path: &Path, problem: String) -> NatsAuthError {
    NatsAuthError::Invalid {
        what,
        path: path.to_path_buf(),
        problem,
    }
}

/// The file is readable and holds a PEM block of `label` (async-nats parses
/// it only when connecting, where a wrong file would just fail the handshake).
fn expect_pem(what: &'static str, path: &Path, label: &str) -> Result<(), NatsAuthError> {
    let text = read(what, path)?;
    let found = text
        .lines()
        .any(|line| line.starts_with("-----BEGIN ") && line.contains(label));
    if found {
        Ok(())
    } else {
        Err(invalid(
            what,
            path,
            format!("holds no PEM block of type {label}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, password: &str) -> NatsAuthOptions {
        NatsAuthOptions {
            user: Some(name.into()),
            password: Some(password.into()),
            ..Default::default()
        }
    }

    /// A file in the temp dir, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "jetcron-nats-connect-{}-{name}",
                std::process::id()
            ));
            std::fs::write(&path, text).expect("write temp file");
            Self(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_server_list_is_comma_separated_as_nats_tools_take_it() {
        let list = ServerList::parse("nats://127.0.0.1:4222, nats://127.0.0.1:4223,127.0.0.1:4224")
            .expect("three servers");
        assert_eq!(list.len(), 3);
        assert_eq!(
            list.to_string(),
            "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
        );
        let one = ServerList::parse("tls://nats.example.com:4443").expect("one server");
        assert_eq!(one.to_string(), "tls://nats.example.com:4443");
    }

    #[test]
    fn a_bad_server_list_names_the_item_and_why() {
        assert_eq!(ServerList::parse(" "), Err(ServerListError::Empty));
        let err = ServerList::parse("nats://a:4222,,nats://b:4222").expect_err("empty item");
        assert_eq!(
            err.to_string(),
            "NATS server 2 of the list, \"\", is not a server URL: empty (a stray comma?)"
        );
        let err = ServerList::parse("nats://a:4222,nats://b:port").expect_err("bad port");
        assert!(
            err.to_string()
                .starts_with("NATS server 2 of the list, \"nats://b:port\""),
            "{err}"
        );
        let err = ServerList::parse("http://a:4222").expect_err("scheme");
        assert!(err.to_string().contains("invalid scheme"), "{err}");
    }

    #[test]
    fn nothing_set_is_an_anonymous_plain_connection() {
        let options = NatsAuthOptions::default();
        assert!(options.connect_options().is_ok());
        assert_eq!(options.describe(), "no credentials");
        assert!(!options.tls_required());
    }

    #[test]
    fn user_and_password_go_together() {
        assert!(user("ticker", "pw").connect_options().is_ok());
        let no_user = NatsAuthOptions {
            password: Some("pw".into()),
            ..Default::default()
        };
        assert!(matches!(
            no_user.connect_options(),
            Err(NatsAuthError::PasswordWithoutUser)
        ));
        let no_password = NatsAuthOptions {
            user: Some("ticker".into()),
            ..Default::default()
        };
        let err = no_password.connect_options().expect_err("no password");
        assert!(matches!(err, NatsAuthError::UserWithoutPassword(ref u) if u == "ticker"));
    }

    #[test]
    fn two_ways_to_authenticate_are_refused_by_name() {
        let options = NatsAuthOptions {
            token: Some("t".into()),
            creds_file: Some("/x.creds".into()),
            ..user("a", "b")
        };
        let err = options.connect_options().expect_err("three methods");
        assert_eq!(
            err.to_string(),
            "choose one way to authenticate to NATS, not user/password and token and creds file"
        );
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_the_reverse() {
        let cert = NatsAuthOptions {
            tls_cert_file: Some("/c.pem".into()),
            ..Default::default()
        };
        assert!(matches!(
            cert.connect_options(),
            Err(NatsAuthError::CertWithoutKey)
        ));
        let key = NatsAuthOptions {
            tls_key_file: Some("/k.pem".into()),
            ..Default::default()
        };
        assert!(matches!(
            key.connect_options(),
            Err(NatsAuthError::KeyWithoutCert)
        ));
    }

    #[test]
    fn unreadable_and_wrong_files_are_named() {
        let missing = NatsAuthOptions {
            tls_ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let err = missing.connect_options().expect_err("missing file");
        assert!(
            err.to_string()
                .starts_with("TLS CA file /nonexistent/ca.pem: "),
            "{err}"
        );

        let not_pem = TempFile::new("ca.pem", "hello\n");
        let options = NatsAuthOptions {
            tls_ca_file: Some(not_pem.0.clone()),
            ..Default::default()
        };
        let err = options.connect_options().expect_err("not PEM");
        assert!(
            err.to_string()
                .ends_with("holds no PEM block of type CERTIFICATE"),
            "{err}"
        );

        let creds = TempFile::new("bad.creds", "not a creds file\n");
        let options = NatsAuthOptions {
            creds_file: Some(creds.0.clone()),
            ..Default::default()
        };
        let err = options.connect_options().expect_err("bad creds");
        assert!(
            matches!(
                err,
                NatsAuthError::Invalid {
                    what: "creds file",
                    ..
                }
            ),
            "{err}"
        );

        let seed = TempFile::new(
            "bad.nk",
            "SAAGNJOZTRPYYXG2NJX3ZNGXYUSDYX2BWO447W3SHG6XQ7U66RWHQ3JUXM\n",
        );
        let options = NatsAuthOptions {
            nkey_seed_file: Some(seed.0.clone()),
            ..Default::default()
        };
        let err = options
            .connect_options()
            .expect_err("account seed, not a user seed");
        assert!(err.to_string().contains("user nkey seed"), "{err}");
    }

    #[test]
    fn a_ca_makes_tls_required_and_secrets_stay_hidden() {
        let options = NatsAuthOptions {
            tls_ca_file: Some("/ca.pem".into()),
            ..user("gateway", "s3cret")
        };
        assert!(options.tls_required());
        assert_eq!(options.describe(), "user \"gateway\", TLS");
        let debug = format!("{options:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("<hidden>"), "{debug}");
    }
}
