//! Run-completion webhooks: when a run with a `webhook` ends, the worker that ran it POSTs the
//! run (with its final values) to that URL, signed, retried with backoff, each attempt timed
//! out. A URL is checked when the run is created and again before every attempt, and the
//! request goes to the addresses that check resolved (no second lookup a DNS rebinding could
//! answer differently, no redirects): unless the operator allows it, nothing is sent to
//! loopback, private, link-local or other internal addresses.

use super::ending::RunResult;
pub use crate::config::WebhookSettings;
use crate::ids::RunId;
use crate::outbound::is_internal;
use crate::store::Run;
use crate::time::Timestamp;
use hmac::{Hmac, KeyInit, Mac};
use secrecy::ExposeSecret;
#[cfg(test)]
use secrecy::SecretString;
use sha2::Sha256;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The signature header: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub const SIGNATURE_HEADER: &str = "x-webhook-signature";

/// Why a webhook URL is refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(
        "this server has no webhook signing secret, so it sends no webhooks (the operator sets \
         webhooks.signing_secret)"
    )]
    NotConfigured,
    #[error("'{0}' is not an absolute http(s) URL")]
    BadUrl(String),
    #[error("credentials in the URL are not accepted; receivers verify the signature instead")]
    Credentials,
    /// Only when internal targets are allowed: then telling this apart probes nothing.
    #[error("host '{0}' could not be resolved")]
    Unresolvable(String),
    /// A host that resolves to an internal address, or (internal targets not allowed) to no
    /// address: one message for both, and no address in it (it is logged), so a caller cannot
    /// map the server's internal network or its DNS by naming hosts.
    #[error(
        "host '{host}' does not resolve to a public address; webhooks go to public addresses \
         only (the operator can allow internal ones: webhooks.allow_private_targets)"
    )]
    Internal { host: String, addr: Option<IpAddr> },
}

/// What a webhook receives: the run as the API shows it, its final values (or
/// `{"__error__": ...}`), and when it was sent.
#[derive(serde::Serialize)]
pub(super) struct Body<'a> {
    #[serde(flatten)]
    pub run: &'a Run,
    pub values: Option<&'a RunResult>,
    pub webhook_sent_at: Timestamp,
}

/// A URL that passed the policy and the addresses to send to.
#[derive(Clone, Debug)]
pub struct Target {
    url: reqwest::Url,
    host: String,
    addrs: Vec<SocketAddr>,
}

/// Checks `raw` against the policy and resolves its host.
pub async fn vet(raw: &str, settings: &WebhookSettings) -> Result<Target, WebhookError> {
    if settings.secret.is_none() {
        return Err(WebhookError::NotConfigured);
    }
    let url = reqwest::Url::parse(raw).map_err(|_| WebhookError::BadUrl(raw.to_owned()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(WebhookError::BadUrl(raw.to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(WebhookError::Credentials);
    }
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Err(WebhookError::BadUrl(raw.to_owned()));
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let lookup = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::lookup_host((host.clone(), port)),
    )
    .await;
    let addrs: Vec<SocketAddr> = match lookup {
        Ok(Ok(found)) => found.collect(),
        _ => Vec::new(),
    };
    if addrs.is_empty() {
        if settings.allow_private_targets {
            return Err(WebhookError::Unresolvable(host));
        }
        tracing::info!(%host, "webhook refused: its host does not resolve");
        return Err(WebhookError::Internal { host, addr: None });
    }
    if !settings.allow_private_targets
        && let Some(addr) = addrs.iter().map(SocketAddr::ip).find(|ip| is_internal(*ip))
    {
        tracing::info!(%host, %addr, "webhook refused: its host resolves to an internal address");
        return Err(WebhookError::Internal {
            host,
            addr: Some(addr),
        });
    }
    Ok(Target { url, host, addrs })
}

/// The signature header's value for `body` sent at `unix_secs`.
pub fn sign(secret: &str, unix_secs: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(unix_secs.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={unix_secs},v1={hex}")
}

/// Sends `body` to `url` in the background, retrying as the settings say.
pub fn spawn_delivery(settings: WebhookSettings, url: String, run_id: RunId, body: Vec<u8>) {
    tokio::spawn(async move {
        deliver(&settings, &url, run_id, &body).await;
    });
}

/// What one attempt came to.
enum Attempt {
    Delivered,
    Retry(String),
    GiveUp(String),
}

async fn deliver(settings: &WebhookSettings, url: &str, run_id: RunId, body: &[u8]) {
    let mut backoff = Duration::from_secs(1);
    for attempt in 1..=settings.attempts {
        let outcome = match vet(url, settings).await {
            Ok(target) => send(settings, &target, run_id, body).await,
            Err(error) => Attempt::GiveUp(error.to_string()),
        };
        match outcome {
            Attempt::Delivered => {
                tracing::info!(%run_id, attempt, "webhook delivered");
                return;
            }
            Attempt::GiveUp(why) => {
                tracing::warn!(%run_id, attempt, %why, "webhook not delivered; giving up");
                return;
            }
            Attempt::Retry(why) if attempt < settings.attempts => {
                tracing::info!(%run_id, attempt, %why, "webhook attempt failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
            Attempt::Retry(why) => {
                tracing::warn!(%run_id, attempts = attempt, %why, "webhook not delivered");
            }
        }
    }
}

async fn send(settings: &WebhookSettings, target: &Target, run_id: RunId, body: &[u8]) -> Attempt {
    let client = crate::outbound::guarded_client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .resolve_to_addrs(&target.host, &target.addrs)
        .build();
    let client = match client {
        Ok(c) => c,
        Err(e) => return Attempt::GiveUp(format!("could not build the HTTP client: {e}")),
    };
    let secret = settings
        .secret
        .as_ref()
        .map(|s| s.expose_secret().to_owned())
        .unwrap_or_default();
    let now = chrono::Utc::now().timestamp();
    let response = client
        .post(target.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::USER_AGENT, "deep-research-webhook")
        .header(SIGNATURE_HEADER, sign(&secret, now, body))
        .header("x-webhook-id", run_id.to_string())
        .body(body.to_vec())
        .send()
        .await;
    match response {
        Ok(r) if r.status().is_success() => Attempt::Delivered,
        Ok(r) => {
            let status = r.status();
            let why = format!("the receiver answered {status}");
            if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 {
                Attempt::Retry(why)
            } else {
                Attempt::GiveUp(why)
            }
        }
        Err(e) if e.is_timeout() => Attempt::Retry("timed out".into()),
        Err(e) => Attempt::Retry(format!("could not reach the receiver: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(allow: bool) -> WebhookSettings {
        WebhookSettings {
            secret: Some(SecretString::from("s3cret")),
            allow_private_targets: allow,
            timeout: Duration::from_secs(1),
            attempts: 1,
        }
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn the_policy_refuses_internal_targets_unless_allowed() {
        let refused = vet("http://127.0.0.1:9/hook", &settings(false)).await;
        assert!(matches!(refused, Err(WebhookError::Internal { .. })));
        let refused = vet("http://localhost:9/hook", &settings(false)).await;
        assert!(matches!(refused, Err(WebhookError::Internal { .. })));
        // A name that does not resolve is refused in the same words: no DNS probe.
        let unknown = vet("http://no-such-host.invalid/hook", &settings(false)).await;
        let internal = vet("http://127.0.0.1:9/hook", &settings(false)).await;
        let words = |r: Result<Target, WebhookError>, host: &str| {
            r.err()
                .map(|e| e.to_string().replace(host, "HOST"))
                .unwrap_or_default()
        };
        assert_eq!(
            words(unknown, "no-such-host.invalid"),
            words(internal, "127.0.0.1")
        );
        assert!(
            vet("http://127.0.0.1:9/hook", &settings(true))
                .await
                .is_ok()
        );
        for bad in ["ftp://example.com/", "/relative", "http://u:p@127.0.0.1/"] {
            assert!(vet(bad, &settings(true)).await.is_err(), "{bad}");
        }
        let none = WebhookSettings {
            secret: None,
            ..settings(true)
        };
        let refused = vet("http://127.0.0.1:9/", &none).await;
        assert!(matches!(refused, Err(WebhookError::NotConfigured)));
    }

    #[test]
    fn signatures_are_hmac_sha256_of_time_and_body() {
        // The digest as Python's hmac module computes it for the same key and message.
        let s = sign("key", 1_700_000_000, b"{}");
        assert_eq!(
            s,
            "t=1700000000,v1=9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae"
        );
        assert_ne!(sign("key", 1_700_000_000, b"{ }"), s);
    }
}
