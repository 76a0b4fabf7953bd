//! Alerts by mail: one message through the channel's SMTP server (lettre),
//! with STARTTLS, implicit TLS, or none, and a login when the channel has
//! one. The subject and plain-text body are the alert's
//! ([`jetcron_core::alert::Alert::subject`], [`Alert::text`]).

use std::time::Duration;

use jetcron_core::alert::Alert;
use jetcron_core::channel::{Channel, EmailChannel, SmtpTls};
use lettre::message::{header::ContentType, Mailbox};
use lettre::transport::smtp::authentication::Credentials;
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

/// Send `alert` through `channel` (an `email` channel); the reason when it fails.
pub async fn send(channel: &Channel, alert: &Alert) -> Result<(), String> {
    let Channel::Email(email) = channel else {
        return Err(format!("channel {:?} does not send mail", channel.name()));
    };
    let message = message(email, alert)?;
    let port = email.smtp_port.unwrap_or(email.tls.default_port());
    let builder = match email.tls {
        SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&email.smtp_host),
        SmtpTls::Implicit => AsyncSmtpTransport::<Tokio1Executor>::relay(&email.smtp_host),
        SmtpTls::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
            &email.smtp_host,
        )),
    }
    .map_err(|e| format!("SMTP server {}: {e}", email.smtp_host))?;
    let mut builder = builder.port(port).timeout(Some(SMTP_TIMEOUT));
    if let (Some(user), Some(password)) = (&email.username, &email.password) {
        builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
    }
    builder
        .build()
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| format!("SMTP {}:{port}: {e}", email.smtp_host))
}
