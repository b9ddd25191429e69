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
