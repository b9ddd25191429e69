//! TLS for the visibility API: the serving certificate, the check of the API server's
//! front-proxy client certificate, and a listener that hands axum connections already
//! through their handshake, each with the name its client certificate carries.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// What the API server's front proxy sends: the CA its client certificate is signed by,
/// the names that certificate may carry, and the headers naming the caller.
#[derive(Clone, Debug, Default)]
pub struct FrontProxy {
    /// PEM of the CA.
    pub ca_pem: String,
    /// Allowed common names; empty: any certificate the CA signed.
    pub allowed_names: Vec<String>,
    /// Headers carrying the user's name, first present wins.
    pub username_headers: Vec<String>,
    /// Headers carrying the user's groups.
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes.
    pub extra_prefixes: Vec<String>,
}

impl FrontProxy {
    /// Reads the front proxy's settings from the ConfigMap the API server publishes; an
    /// error saying what is missing when the API server has none.
    pub async fn read(client: &Client) -> anyhow::Result<FrontProxy> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
        let map = api
            .get("extension-apiserver-authentication")
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "reading kube-system/extension-apiserver-authentication: {e}; the controller needs the \
                     role extension-apiserver-authentication-reader (see deploy/rbac.yaml)"
                )
            })?;
        let data = map.data.unwrap_or_default();
        let list = |key: &str| -> Vec<String> {
            data.get(key)
                .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
                .unwrap_or_default()
        };
        let ca_pem = data
            .get("requestheader-client-ca-file")
            .cloned()
            .filter(|pem| !pem.trim().is_empty())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the API server has no front-proxy CA (kube-apiserver --requestheader-client-ca-file): \
                     it cannot forward requests to an aggregated API"
                )
            })?;
        Ok(FrontProxy {
            ca_pem,
            allowed_names: list("requestheader-allowed-names"),
            username_headers: list("requestheader-username-headers"),
            group_headers: list("requestheader-group-headers"),
            extra_prefixes: list("requestheader-extra-headers-prefix"),
        })
    }
}

/// A connection: where from, and whether it presented an allowed front-proxy certificate.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The remote address.
    pub addr: SocketAddr,
    /// The common name of its client certificate, when the front-proxy CA signed it.
    pub proxy_name: Option<String>,
}

/// The server's TLS configuration: its certificate (from `certificate`'s PEM files, or made
/// here and signed by itself), and client certificates verified against the front-proxy CA
/// when presented (a connection without one is served, and its requests refused).
pub(crate) fn server_config(
    front: &FrontProxy,
    certificate: Option<&(PathBuf, PathBuf)>,
) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(front.ca_pem.as_bytes()) {
        let cert = cert.context("reading the front-proxy CA")?;
        roots
            .add(cert)
            .context("adding the front-proxy CA to the trusted roots")?;
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
            .allow_unauthenticated()
            .build()
            .context("building the front-proxy certificate check")?;
    let (chain, key) = match certificate {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("reading {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("reading {}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("reading {}", key.display()))?;
            (chain, key)
        }
        None => self_signed()?,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .context("the serving certificate")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A certificate signed by itself, for the names the API server may dial.
fn self_signed() -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let names = vec![
        "muster-visibility".to_owned(),
        "muster-visibility.muster-system.svc".to_owned(),
        "localhost".to_owned(),
    ];
    let certified = rcgen::generate_simple_self_signed(names).context("making a certificate")?;
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| anyhow::anyhow!("the certificate's key: {e}"))?;
    Ok((vec![certified.cert.der().clone()], key))
}

/// The common name of a DER certificate's subject.
fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned)
}

/// How long a client may take over its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Accepts TCP connections and completes their TLS handshakes in tasks of their own, so that
/// one slow client never holds up the next.
pub(crate) struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, Peer)>,
}

impl TlsListener {
    /// Listens on `addr`.
    pub(crate) async fn bind(
        addr: SocketAddr,
        config: rustls::ServerConfig,
    ) -> std::io::Result<TlsListener> {
        let tcp = TcpListener::bind(addr).await?;
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, remote) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!(error = %e, "accepting a visibility API connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let proxy_name = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|certs| certs.first())
                                .and_then(common_name);
                            let _ = tx
                                .send((
                                    tls,
                                    Peer {
                                        addr: remote,
                                        proxy_name,
                                    },
                                ))
                                .await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, %remote, "a TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(%remote, "a TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { local, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task is gone (it never returns while this listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            addr: self.local,
            proxy_name: None,
        })
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Peer {
        stream.remote_addr().clone()
    }
}
