//! What a throw-away control plane needs to authenticate: an admin token, a service-account
//! key pair and a kubeconfig.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

use anyhow::Context as _;

/// A random token of 48 hex digits (not cryptographic strength: the cluster lives on loopback
/// for one test).
pub(crate) fn random_token() -> String {
    let mut token = String::with_capacity(48);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    while token.len() < 48 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u32(std::process::id());
        hasher.write_usize(token.len());
        let _ = write!(token, "{:016x}", hasher.finish());
    }
    token.truncate(48);
    token
}

/// Writes the API server's token file: `token` authenticates user `admin` in `system:masters`.
pub(crate) fn write_token_file(path: &Path, token: &str) -> anyhow::Result<()> {
    std::fs::write(
        path,
        format!("{token},admin,admin-uid,\"system:masters\"\n"),
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// Generates the service-account signing key pair (ECDSA P-256, PKCS#8 and SPKI PEM) into
/// `private` and `public`.
pub(crate) fn write_service_account_keys(private: &Path, public: &Path) -> anyhow::Result<()> {
    let key = rcgen::KeyPair::generate().context("generating the service-account key")?;
    std::fs::write(private, key.serialize_pem())
        .with_context(|| format!("writing {}", private.display()))?;
    std::fs::write(public, key.public_key_pem())
        .with_context(|| format!("writing {}", public.display()))
}

/// The common name of the API server's front-proxy client certificate.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// Generates a front-proxy CA (`front-proxy-ca.crt`) and a client certificate it signs
/// (`front-proxy-client.crt`, `.key`, common name [`FRONT_PROXY_CLIENT`]) into `dir`: what the
/// API server presents when it forwards a request to an aggregated API.
pub(crate) fn write_front_proxy(dir: &Path) -> anyhow::Result<()> {
    let ca_key = rcgen::KeyPair::generate().context("generating the front-proxy CA key")?;
    let mut ca_params =
        rcgen::CertificateParams::new(Vec::<String>::new()).context("front-proxy CA parameters")?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "muster-testkit-front-proxy-ca");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params
        .self_signed(&ca_key)
        .context("signing the front-proxy CA")?;
    let client_key = rcgen::KeyPair::generate().context("generating the front-proxy key")?;
    let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new())
        .context("front-proxy client parameters")?;
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, FRONT_PROXY_CLIENT);
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let client = client_params
        .signed_by(&client_key, &issuer)
        .context("signing the front-proxy client certificate")?;
    for (name, text) in [
        ("front-proxy-ca.crt", ca.pem()),
        ("front-proxy-client.crt", client.pem()),
        ("front-proxy-client.key", client_key.serialize_pem()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A kubeconfig for the admin user against `https://127.0.0.1:<port>`, skipping TLS
/// verification (the API server's certificate is self-generated).
pub(crate) fn kubeconfig(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: muster-testkit
  cluster:
    server: {server}
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: {token}
contexts:
- name: muster-testkit
  context:
    cluster: muster-testkit
    user: admin
current-context: muster-testkit
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_48_hex_digits_and_differ() {
        let a = random_token();
        let b = random_token();
        assert_eq!(a.len(), 48);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_kubeconfig_parses() {
        let text = kubeconfig("https://127.0.0.1:1234", "abc");
        let parsed = kube::config::Kubeconfig::from_yaml(&text);
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}
