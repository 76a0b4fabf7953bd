//! Alerts by mail: one message through the channel's SMTP server (lettre),
//! with STARTTLS (required: no fallback to plain text), implicit TLS, or
//! none, and a login when the channel has one. The subject and plain-text body are the alert's
//! ([`jetcron_core::alert::Alert::subject`], [`Alert::text`]).

use std::path::Path;
use std::time::Duration;

use jetcron_core::alert::Alert;
use jetcron_core::channel::{Channel, EmailChannel, SmtpTls};
use lettre::message::{header::ContentType, Mailbox};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};

/// How long one SMTP conversation may take.
const SMTP_TIMEOUT: Duration = Duration::from_secs(20);

fn mailbox(field: &str, text: &str) -> Result<Mailbox, String> {
    text.parse::<Mailbox>()
        .map_err(|e| format!("{field} {text:?} is not a mail address: {e}"))
}

/// Build the message of `alert` for `channel`.
pub fn message(channel: &EmailChannel, alert: &Alert) -> Result<Message, String> {
    let mut builder = Message::builder()
        .from(mailbox("from", &channel.from)?)
        .subject(alert.subject())
        .header(ContentType::TEXT_PLAIN);
    for to in &channel.to {
        builder = builder.to(mailbox("to", to)?);
    }
    for cc in &channel.cc {
        builder = builder.cc(mailbox("cc", cc)?);
    }
    builder
        .body(alert.text())
        .map_err(|e| format!("cannot build the mail: {e}"))
}

/// TLS parameters for `host`: the public roots, and the certificates of
/// `extra_roots` (a PEM file, `--smtp-ca-file`) for a private CA.
fn tls_parameters(host: &str, extra_roots: Option<&Path>) -> Result<TlsParameters, String> {
    let mut builder = TlsParameters::builder(host.to_string());
    if let Some(path) = extra_roots {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read SMTP CA file {}: {e}", path.display()))?;
        let certificate = Certificate::from_pem(&pem)
            .map_err(|e| format!("SMTP CA file {}: {e}", path.display()))?;
        builder = builder.add_root_certificate(certificate);
    }
    builder
        .build_rustls()
        .map_err(|e| format!("TLS for {host}: {e}"))
}

/// Send `alert` through `channel` (an `email` channel); the reason when it
/// fails. `extra_roots`: a PEM file of CA certificates trusted besides the
/// public ones.
pub async fn send(
    channel: &Channel,
    alert: &Alert,
    extra_roots: Option<&Path>,
) -> Result<(), String> {
    let Channel::Email(email) = channel else {
        return Err(format!("channel {:?} does not send mail", channel.name()));
    };
    let message = message(email, alert)?;
    let port = email.smtp_port.unwrap_or(email.tls.default_port());
    let host = email.smtp_host.as_str();
    let tls = match email.tls {
        SmtpTls::Starttls => Tls::Required(tls_parameters(host, extra_roots)?),
        SmtpTls::Implicit => Tls::Wrapper(tls_parameters(host, extra_roots)?),
        SmtpTls::None => Tls::None,
    };
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .tls(tls)
        .timeout(Some(SMTP_TIMEOUT));
    if let (Some(user), Some(password)) = (&email.username, &email.password) {
        builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
    }
    builder
        .build()
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| format!("SMTP {host}:{port}: {e}"))
}
