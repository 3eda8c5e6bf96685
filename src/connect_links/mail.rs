//! SMTP delivery (lettre), when `GATEHOUSE_SMTP_URL` is set. A mail is first written to the
//! outbox in the transaction that creates it (the intent); a successful send marks it sent (the
//! outcome). A failed send leaves it in the outbox for the operator, so nothing is lost.

use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor, message::Mailbox};

use crate::config::Config;

/// The configured SMTP transport and sender. Never printed (its URL may hold a password).
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    /// Where an undelivered mail is recorded as an ops failure (`mail.send`).
    ops: Option<crate::ops::Recorder>,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer").finish_non_exhaustive()
    }
}

impl Mailer {
    /// The mailer, when SMTP is configured (the URL and sender were checked at boot).
    pub fn from_config(config: &Config) -> anyhow::Result<Option<Mailer>> {
        let Some(url) = &config.smtp_url else { return Ok(None) };
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.expose())
            .map_err(|_| anyhow::anyhow!("GATEHOUSE_SMTP_URL is not an SMTP URL"))?
            .timeout(Some(std::time::Duration::from_secs(10)))
            .build();
        let from = config.smtp_from.parse().map_err(|_| anyhow::anyhow!("GATEHOUSE_SMTP_FROM is not a mailbox"))?;
        Ok(Some(Mailer { transport, from, ops: None }))
    }

    /// Records undelivered mail as ops failures through `ops`.
    pub fn with_ops(mut self, ops: crate::ops::Recorder) -> Mailer {
        self.ops = Some(ops);
        self
    }

    /// Records that a mail of `tenant` could not be delivered (it waits in the outbox). The
    /// message names the mail and the transport's error, never the recipient or the body.
    pub fn undelivered(&self, tenant: crate::ids::TenantId, mail_id: uuid::Uuid, reason: &str) {
        if let Some(ops) = &self.ops {
            crate::ops::record(
                ops,
                crate::ops::Failure {
                    operation: "mail.send",
                    stage: "smtp".into(),
                    tenant: Some(tenant.0),
                    workspace: None,
                    status: crate::ops::Status::Failed,
                    code: "not_delivered".into(),
                    message: format!("mail {mail_id} waits in the outbox: {reason}"),
                    reference: None,
                },
            );
        }
    }

    /// Sends one plain-text mail. The error says what failed, never the body.
    pub async fn send(&self, to: &str, subject: &str, body: &str) -> Result<(), String> {
        let to: Mailbox = to.parse().map_err(|_| "the recipient is not a mailbox".to_owned())?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .body(body.to_owned())
            .map_err(|e| format!("the mail cannot be built: {e}"))?;
        self.transport.send(message).await.map(|_| ()).map_err(|e| format!("SMTP delivery failed: {e}"))
    }
}
