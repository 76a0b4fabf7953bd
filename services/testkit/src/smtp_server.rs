//! A real SMTP server for mail tests: `python3 -m aiosmtpd` (PyPI's
//! `aiosmtpd`, installed by `infra/test.sh`) on a free port, storing every
//! message it accepts in a temporary Maildir. Killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// aiosmtpd requiring STARTTLS, then AUTH with one login, storing into a
/// Maildir. Arguments: port, maildir, cert, key, user, password.
const AUTH_SERVER_SCRIPT: &str = r#"
import signal, ssl, sys
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox
from aiosmtpd.smtp import AuthResult, LoginPassword

port, maildir, cert, key, user, password = sys.argv[1:]

def authenticate(server, session, envelope, mechanism, data):
    ok = (isinstance(data, LoginPassword)
          and data.login.decode() == user and data.password.decode() == password)
    return AuthResult(success=ok)

context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(cert, key)
controller = Controller(Mailbox(maildir), hostname="127.0.0.1", port=int(port),
                        tls_context=context, require_starttls=True,
                        authenticator=authenticate, auth_required=True)
controller.start()
signal.sigwait([signal.SIGTERM, signal.SIGINT])
controller.stop()
"#;

/// A running aiosmtpd.
pub struct SmtpServer {
    child: Child,
    port: u16,
    maildir: TempDir,
}

/// One message as the server stored it.
#[derive(Debug, Clone)]
pub struct ReceivedMail {
    /// The raw message (headers and body).
    pub raw: String,
}

impl ReceivedMail {
    /// The value of header `name` (case-insensitive; folded lines joined).
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.raw.split("\r\n\r\n").next().unwrap_or_default();
        let head = head.split("\n\n").next().unwrap_or_default();
        let mut value: Option<String> = None;
        for line in head.lines() {
            if line.starts_with([' ', '\t']) {
                if let Some(v) = value.as_mut() {
                    v.push_str(line.trim_start_matches([' ', '\t']));
                }
                continue;
            }
            if value.is_some() {
                break;
            }
            if let Some((key, rest)) = line.split_once(':') {
                if key.eq_ignore_ascii_case(name) {
                    value = Some(rest.trim().to_string());
                }
            }
        }
        value
    }

    /// The body after the headers (as sent: lettre's plain text is 7bit or
    /// quoted-printable; soft line breaks are joined).
    pub fn body(&self) -> String {
        let body = self
            .raw
            .split_once("\r\n\r\n")
            .or_else(|| self.raw.split_once("\n\n"))
            .map(|(_, b)| b)
            .unwrap_or_default();
        body.replace("=\r\n", "")
            .replace("=\n", "")
            .replace("=3D", "=")
    }
}

impl SmtpServer {
    /// Start on a free port and wait until it accepts connections.
    pub fn start() -> Self {
        Self::start_inner(None)
    }

    /// Start offering STARTTLS with `cert` and `key` (PEM files) and
    /// refusing mail sent before it (aiosmtpd's `--tlscert`, `--tlskey`;
    /// TLS is required by default).
    pub fn start_starttls(cert: &std::path::Path, key: &std::path::Path) -> Self {
        Self::start_inner(Some((cert, key)))
    }

    fn start_inner(tls: Option<(&std::path::Path, &std::path::Path)>) -> Self {
        Self::spawn(|port, maildir| {
            let mut command = Command::new("python3");
            command.args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")]);
            if let Some((cert, key)) = tls {
                command.arg("--tlscert").arg(cert).arg("--tlskey").arg(key);
            }
            command
                .args(["-c", "aiosmtpd.handlers.Mailbox"])
                .arg(maildir);
            command
        })
    }

    /// Start requiring STARTTLS (with `cert` and `key`) and then AUTH
    /// (PLAIN or LOGIN) as `user` with `password` before it takes mail:
    /// aiosmtpd's `Controller` with an authenticator, as a script (its
    /// command line has no AUTH options).
    pub fn start_with_auth(
        cert: &std::path::Path,
        key: &std::path::Path,
        user: &str,
        password: &str,
    ) -> Self {
        Self::spawn(|port, maildir| {
            let mut command = Command::new("python3");
            command
                .arg("-c")
                .arg(AUTH_SERVER_SCRIPT)
                .arg(port.to_string())
                .arg(maildir)
                .args([cert, key])
                .args([user, password]);
            command
        })
    }

    fn spawn(command: impl FnOnce(u16, &std::path::Path) -> Command) -> Self {
        let port = crate::free_port();
        let maildir = tempfile::Builder::new()
            .prefix("jetcron-smtp-")
            .tempdir()
            .expect("maildir");
        let child = command(port, &maildir.path().join("mail"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 with aiosmtpd (pip install aiosmtpd; infra/test.sh does)");
        crate::nats_server::wait_for_port(port, Duration::from_secs(20), "aiosmtpd");
        Self {
            child,
            port,
            maildir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every message received so far, oldest first.
    pub fn messages(&self) -> Vec<ReceivedMail> {
        let mut files: Vec<_> = ["new", "cur"]
            .iter()
            .filter_map(|d| std::fs::read_dir(self.maildir.path().join("mail").join(d)).ok())
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let modified = e.metadata().ok()?.modified().ok()?;
                Some((modified, e.path()))
            })
            .collect();
        files.sort();
        files
            .into_iter()
            .filter_map(|(_, path)| std::fs::read_to_string(path).ok())
            .map(|raw| ReceivedMail { raw })
            .collect()
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
