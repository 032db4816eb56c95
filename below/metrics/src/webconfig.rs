//! The web config file: the YAML format node_exporter and Prometheus read
//! (`--web.config.file`, checked by `promtool check web-config`), served with
//! rustls. Loaded once at start (an invalid file is an error that stops
//! `record`) and again whenever it or a file it names changes, so
//! certificates are rotated without a restart.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerified;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::DigitallySignedStruct;
use rustls::DistinguishedName;
use rustls::SignatureScheme;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::UnixTime;
use serde::Deserialize;

/// The file as written; unknown keys are errors, as with promtool.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<String>,
    key_file: Option<String>,
    /// Inline PEM instead of the files (newer node_exporters read these).
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// We serve HTTP/1.1 only; the key is accepted for compatibility.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The headers the format lets a config set, and the values allowed where
/// the format fixes them (the same list promtool checks against).
const HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// A checked web config, ready to serve with.
pub(crate) struct WebConfig {
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    /// User name → bcrypt hash.
    pub(crate) users: BTreeMap<String, String>,
    pub(crate) headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    /// Verdicts of earlier bcrypt checks, keyed by a digest of user, hash and
    /// password, so a scraper's every request does not cost a bcrypt.
    pub(crate) auth_cache: Mutex<HashMap<[u8; 32], bool>>,
    /// Files whose change means reloading: the config and what it names.
    pub(crate) watched: Vec<PathBuf>,
    /// Things worth a log line that do not stop us (TLS 1.0 asked for…).
    pub(crate) warnings: Vec<String>,
}

fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// Reads and checks the web config at `path`. The error says what is wrong.
pub(crate) fn load(path: &Path) -> Result<WebConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("Failed to read web config file {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    from_str(&text, dir)
        .with_context(|| format!("Invalid web config file {}", path.display()))
        .map(|mut c| {
            c.watched.insert(0, path.to_path_buf());
            c
        })
}

/// Checks a web config's text; relative paths are taken from `dir` (the
/// config file's directory, as node_exporter does).
pub(crate) fn from_str(text: &str, dir: &Path) -> Result<WebConfig> {
    // An empty file is a valid, empty config (YAML reads it as null).
    let file: File = if text.trim().is_empty() {
        File::default()
    } else {
        serde_yaml_ng::from_str::<Option<File>>(text)?.unwrap_or_default()
    };
    let mut warnings = Vec::new();
    let mut watched = Vec::new();

    let mut headers = Vec::new();
    for (k, v) in file
        .http_server_config
        .and_then(|h| h.headers)
        .unwrap_or_default()
    {
        let Some((_, allowed)) = HEADERS.iter().find(|(h, _)| *h == k) else {
            bail!(
                "http_server_config.headers: header {:?} can not be configured (allowed: {})",
                k,
                HEADERS.iter().map(|h| h.0).collect::<Vec<_>>().join(", ")
            );
        };
        if !allowed.is_empty() && !allowed.contains(&v.as_str()) {
            bail!(
                "http_server_config.headers: {} must be one of {:?}, not {:?}",
                k,
                allowed,
                v
            );
        }
        let value = hyper::header::HeaderValue::from_str(&v)
            .map_err(|_| anyhow!("http_server_config.headers: {} has an invalid value", k))?;
        headers.push((hyper::header::HeaderName::from_static(lower(k)), value));
    }

    let users = file.basic_auth_users.unwrap_or_default();
    for (user, hash) in &users {
        check_bcrypt_hash(hash)
            .with_context(|| format!("basic_auth_users: {:?} has no valid bcrypt hash", user))?;
    }

    let tls = match file.tls_server_config {
        Some(t) if tls_enabled(&t) => Some(Arc::new(server_config(
            t,
            dir,
            &mut watched,
            &mut warnings,
        )?)),
        _ => None,
    };
    if tls.is_none() && !users.is_empty() {
        warnings.push(
            "basic_auth_users without tls_server_config: passwords cross the network in clear text"
                .into(),
        );
    }
    Ok(WebConfig {
        tls,
        users,
        headers,
        auth_cache: Mutex::new(HashMap::new()),
        watched,
        warnings,
    })
}

/// The lower-case static name of an allowed header (HeaderName wants it so).
fn lower(k: String) -> &'static str {
    match k.as_str() {
        "Strict-Transport-Security" => "strict-transport-security",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-Frame-Options" => "x-frame-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "content-security-policy",
    }
}

/// `$2a$`, `$2b$`, `$2x$` or `$2y$`, a two-digit cost from 4 to 31, `$`, and
/// 53 characters of bcrypt's base64: checked without hashing anything.
fn check_bcrypt_hash(h: &str) -> Result<()> {
    let b = h.as_bytes();
    if b.len() != 60
        || !(h.starts_with("$2a$")
            || h.starts_with("$2b$")
            || h.starts_with("$2x$")
            || h.starts_with("$2y$"))
        || b[6] != b'$'
    {
        bail!("expected $2y$NN$ and 53 characters (htpasswd -nB USER makes one)");
    }
    let cost: u32 = h[4..6].parse().context("the cost is not a number")?;
    if !(4..=31).contains(&cost) {
        bail!("cost {} is outside 4..=31", cost);
    }
    if !b[7..]
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'/')
    {
        bail!("the salt and hash hold characters bcrypt does not use");
    }
    Ok(())
}

/// TLS is on when any of these is set, as in node_exporter.
fn tls_enabled(t: &TlsFile) -> bool {
    [
        &t.cert_file,
        &t.key_file,
        &t.cert,
        &t.key,
        &t.client_ca_file,
        &t.client_ca,
        &t.client_auth_type,
    ]
    .iter()
    .any(|v| v.as_deref().is_some_and(|s| !s.is_empty()))
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// PEM text from the file key (read, and watched) or the inline key.
fn pem(
    what: &str,
    file: &Option<String>,
    inline: &Option<String>,
    dir: &Path,
    watched: &mut Vec<PathBuf>,
) -> Result<Option<Vec<u8>>> {
    match (nonempty(file), nonempty(inline)) {
        (Some(_), Some(_)) => bail!("tls_server_config: {what}_file and {what} are both set"),
        (Some(f), None) => {
            let p = dir.join(f);
            let data = std::fs::read(&p).with_context(|| {
                format!(
                    "tls_server_config: failed to read {what}_file {}",
                    p.display()
                )
            })?;
            watched.push(p);
            Ok(Some(data))
        }
        (None, Some(text)) => Ok(Some(text.as_bytes().to_vec())),
        (None, None) => Ok(None),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ClientAuth {
    None,
    Request,
    RequireAny,
    VerifyIfGiven,
    RequireAndVerify,
}

fn server_config(
    t: TlsFile,
    dir: &Path,
    watched: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) -> Result<rustls::ServerConfig> {
    let certs = pem("cert", &t.cert_file, &t.cert, dir, watched)?
        .ok_or_else(|| anyhow!("tls_server_config: missing cert_file"))?;
    let key = pem("key", &t.key_file, &t.key, dir, watched)?
        .ok_or_else(|| anyhow!("tls_server_config: missing key_file"))?;
    let certs = CertificateDer::pem_slice_iter(&certs)
        .collect::<Result<Vec<_>, _>>()
        .context("tls_server_config: cert_file is not PEM")?;
    if certs.is_empty() {
        bail!("tls_server_config: cert_file holds no certificate");
    }
    let key = PrivateKeyDer::from_pem_slice(&key)
        .context("tls_server_config: key_file holds no PEM private key")?;

    let auth = match t.client_auth_type.as_deref().unwrap_or("") {
        "" | "NoClientCert" => ClientAuth::None,
        "RequestClientCert" => ClientAuth::Request,
        // RequireClientCert: the format's older name.
        "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAny,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
        other => bail!(
            "tls_server_config: invalid client_auth_type {:?} (NoClientCert, RequestClientCert, \
             RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert)",
            other
        ),
    };
    let ca = pem("client_ca", &t.client_ca_file, &t.client_ca, dir, watched)?;
    if ca.is_some() && auth == ClientAuth::None {
        bail!("tls_server_config: client_ca_file is set but client_auth_type is NoClientCert");
    }
    let sans = t.client_allowed_sans.unwrap_or_default();
    if !sans.is_empty() && !matches!(auth, ClientAuth::RequireAny | ClientAuth::RequireAndVerify) {
        bail!(
            "tls_server_config: client_allowed_sans needs client_auth_type RequireAnyClientCert \
             or RequireAndVerifyClientCert"
        );
    }

    let mut provider = provider();
    if let Some(names) = &t.cipher_suites {
        // Go's list names TLS 1.2 suites only; TLS 1.3's are always on.
        let kept = pick_offered(
            "cipher_suites",
            names,
            warnings,
            |name| {
                let found = provider
                    .cipher_suites
                    .iter()
                    .find(|s| format!("{:?}", s.suite()) == name || go_alias(name, s.suite()));
                Ok(found.copied())
            },
            |s| s.tls13().is_none(),
        )?;
        let tls13: Vec<_> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied()
            .collect();
        provider.cipher_suites = tls13.into_iter().chain(kept).collect();
    }
    if let Some(names) = &t.curve_preferences {
        provider.kx_groups = pick_offered(
            "curve_preferences",
            names,
            warnings,
            |name| {
                let group = match name {
                    "X25519" => rustls::NamedGroup::X25519,
                    "CurveP256" => rustls::NamedGroup::secp256r1,
                    "CurveP384" => rustls::NamedGroup::secp384r1,
                    "CurveP521" => rustls::NamedGroup::secp521r1,
                    other => bail!(
                        "tls_server_config.curve_preferences: unknown curve {:?}",
                        other
                    ),
                };
                Ok(provider
                    .kx_groups
                    .iter()
                    .find(|g| g.name() == group)
                    .copied())
            },
            |_| true,
        )?;
    }

    let min = version(&t.min_version, "min_version", 12, warnings)?;
    let max = version(&t.max_version, "max_version", 13, warnings)?;
    if max < 12 {
        bail!("tls_server_config.max_version: rustls speaks TLS 1.2 and 1.3 only");
    }
    let min = min.max(12);
    if min > max {
        bail!("tls_server_config: min_version is above max_version");
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (min..=max).contains(v))
            .map(|(_, p)| p)
            .collect();

    let provider = Arc::new(provider);
    let roots = match &ca {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(c.context("tls_server_config: client_ca_file is not PEM")?)
                    .context("tls_server_config: a client CA certificate is invalid")?;
            }
            if roots.is_empty() {
                bail!("tls_server_config: client_ca_file holds no certificate");
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let verifier: Option<Arc<dyn ClientCertVerifier>> = match auth {
        ClientAuth::None => None,
        ClientAuth::Request | ClientAuth::RequireAny => Some(Arc::new(AnyClientCert {
            mandatory: auth == ClientAuth::RequireAny,
            algorithms: provider.signature_verification_algorithms,
        })),
        ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify => {
            let Some(roots) = roots else {
                bail!(
                    "tls_server_config: client_auth_type {:?} needs client_ca_file",
                    t.client_auth_type.unwrap_or_default()
                );
            };
            let b = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
            let b = if auth == ClientAuth::VerifyIfGiven {
                b.allow_unauthenticated()
            } else {
                b
            };
            Some(b.build().context("tls_server_config: client CA")?)
        }
    };
    let verifier = match (verifier, sans.is_empty()) {
        (Some(inner), false) => Some(Arc::new(AllowedSans {
            inner,
            allowed: sans,
        }) as Arc<dyn ClientCertVerifier>),
        (v, _) => v,
    };

    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .context("tls_server_config: versions")?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .context("tls_server_config: cert_file and key_file do not make a key pair")?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// What a `tls_server_config` list (`key`) asks for, in the file's order:
/// `find` looks a name up in rustls' provider (an error for a name the
/// format does not know), and of what it finds `keep` says what the list
/// adds. A name rustls does not offer is skipped with a warning, as Go's
/// lists name more than rustls has; a list of which rustls offers none is
/// an error.
fn pick_offered<T>(
    key: &str,
    names: &[String],
    warnings: &mut Vec<String>,
    find: impl Fn(&str) -> Result<Option<T>>,
    keep: impl Fn(&T) -> bool,
) -> Result<Vec<T>> {
    let mut kept = Vec::new();
    for name in names {
        match find(name)? {
            Some(x) if keep(&x) => kept.push(x),
            Some(_) => {}
            None => warnings.push(format!(
                "tls_server_config.{key}: {name} is not offered by rustls; skipped"
            )),
        }
    }
    if kept.is_empty() && !names.is_empty() {
        bail!("tls_server_config.{key}: none of {names:?} is offered by rustls");
    }
    Ok(kept)
}

/// Go's short names for the ChaCha20 suites.
fn go_alias(name: &str, suite: rustls::CipherSuite) -> bool {
    let full = format!("{:?}", suite);
    full.ends_with("_CHACHA20_POLY1305_SHA256") && name == full.trim_end_matches("_SHA256")
}

/// TLS10…TLS13 as 10…13; below 1.2 rustls cannot go (a warning for a
/// minimum, since ours is then stricter).
fn version(v: &Option<String>, key: &str, default: u8, warnings: &mut Vec<String>) -> Result<u8> {
    let n = match v.as_deref() {
        None | Some("") => return Ok(default),
        Some("TLS10") => 10,
        Some("TLS11") => 11,
        Some("TLS12") => 12,
        Some("TLS13") => 13,
        Some(other) => bail!(
            "tls_server_config.{}: unknown TLS version {:?} (TLS10, TLS11, TLS12 or TLS13)",
            key,
            other
        ),
    };
    if n < 12 && key == "min_version" {
        warnings.push(format!(
            "tls_server_config.min_version TLS{}: rustls speaks TLS 1.2 and 1.3 only, so the minimum is TLS 1.2",
            n
        ));
    }
    Ok(n)
}

/// RequestClientCert and RequireAnyClientCert: a certificate is asked for
/// (or required) but not checked against any CA; the client still proves
/// it holds the key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// client_allowed_sans: after the inner check, the client's certificate
/// must name one of these (DNS name, email, IP address or URI).
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }
    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = crate::san::names(end_entity).unwrap_or_default();
        if names.iter().any(|n| self.allowed.contains(n)) {
            Ok(ok)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether `pass` is `user`'s password. Unknown users are checked against a
/// configured hash too, so timing does not tell which users exist.
pub(crate) fn check_password_in(users: &BTreeMap<String, String>, user: &str, pass: &str) -> bool {
    let (known, hash) = match users.get(user) {
        Some(h) => (true, h.as_str()),
        None => match users.values().next() {
            Some(h) => (false, h.as_str()),
            None => return false,
        },
    };
    let ok = bcrypt::verify(pass, hash).unwrap_or(false);
    known && ok
}

/// The auth cache's key for one attempt.
pub(crate) fn cache_key(user: &str, pass: &str) -> [u8; 32] {
    let mut d = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user.as_bytes(), pass.as_bytes()] {
        d.update(&(part.len() as u64).to_le_bytes());
        d.update(part);
    }
    d.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str, dir: &Path) -> String {
        match from_str(yaml, dir) {
            Ok(_) => panic!("accepted:\n{yaml}"),
            Err(e) => format!("{:#}", e),
        }
    }

    /// A CA, a server key pair and a client key pair made by the openssl
    /// CLI in a temporary directory (openssl is among the test packages).
    fn pki() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=ca
for n in server other; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $n.key -out $n.crt -days 2 -subj /CN=$n -addext subjectAltName=IP:127.0.0.1
done
"#;
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(dir.path())
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "openssl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    }

    #[test]
    fn sans_of_a_certificate_as_go_prints_them() {
        let pem = include_bytes!("testdata/sans.pem");
        let der = CertificateDer::from_pem_slice(pem).unwrap();
        assert_eq!(
            crate::san::names(&der).unwrap(),
            [
                "prometheus.test",
                "ops@example.test",
                "spiffe://example.test/prometheus",
                "192.0.2.7",
                "2001:db8::1",
                "192.0.2.8",
            ]
        );
        // Truncated or not DER: no names, no panic.
        for n in [0, 1, 10, der.len() / 2, der.len() - 1] {
            let _ = crate::san::names(&der[..n]);
        }
        assert_eq!(crate::san::names(b"\x30\x84\xff\xff\xff\xff"), None);
    }

    #[test]
    fn an_empty_file_serves_plain_http_without_auth() {
        for text in ["", "\n# nothing\n", "{}", "basic_auth_users:\n"] {
            let c = from_str(text, Path::new("/")).unwrap();
            assert!(c.tls.is_none() && c.users.is_empty() && c.headers.is_empty());
        }
    }

    #[test]
    fn mistakes_are_errors_that_say_what() {
        let d = Path::new("/nonexistent");
        assert!(err("tls_server_confg: {}", d).contains("unknown field `tls_server_confg`"));
        assert!(err("tls_server_config:\n  certfile: a", d).contains("unknown field `certfile`"));
        assert!(err("basic_auth_users:\n  prom: secret", d)
            .contains("\"prom\" has no valid bcrypt hash"));
        let cost32 = format!("basic_auth_users:\n  p: $2y$32${}", "a".repeat(53));
        assert!(err(&cost32, d).contains("cost 32"));
        assert!(err("http_server_config:\n  headers:\n    Server: x", d)
            .contains("\"Server\" can not be configured"));
        assert!(err(
            "http_server_config:\n  headers:\n    X-Frame-Options: allow",
            d
        )
        .contains("X-Frame-Options must be one of"));
        assert!(err(
            "http_server_config:\n  headers:\n    Content-Security-Policy: \"a\\nb\"",
            d
        )
        .contains("invalid value"));
        assert!(err("tls_server_config:\n  key_file: k", d).contains("missing cert_file"));
        assert!(err("tls_server_config:\n  cert_file: c.pem", d)
            .contains("failed to read cert_file /nonexistent/c.pem"));
        // Repeated keys are not silently merged.
        assert!(err("basic_auth_users: {}\nbasic_auth_users: {}", d).contains("duplicate"));
    }

    #[test]
    fn tls_settings_are_checked_like_promtool_does() {
        let pki = pki();
        let d = pki.path();
        let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
        let ok = from_str(tls, d).unwrap();
        assert!(ok.tls.is_some());
        assert_eq!(ok.watched, [d.join("server.crt"), d.join("server.key")]);
        let with = |more: &str| format!("{tls}{more}");
        assert!(err(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n",
            d
        )
        .contains("do not make a key pair"));
        assert!(
            err("tls_server_config:\n  cert_file: server.crt\n", d).contains("missing key_file")
        );
        assert!(err(&with("  client_auth_type: Sometimes\n"), d)
            .contains("invalid client_auth_type \"Sometimes\""));
        assert!(err(&with("  client_ca_file: ca.crt\n"), d)
            .contains("client_auth_type is NoClientCert"));
        assert!(
            err(&with("  client_auth_type: RequireAndVerifyClientCert\n"), d)
                .contains("needs client_ca_file")
        );
        assert!(err(&with("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n  client_allowed_sans: [a]\n"), d).contains("client_allowed_sans needs"));
        assert!(err(&with("  max_version: TLS11\n"), d).contains("TLS 1.2 and 1.3 only"));
        assert!(
            err(&with("  min_version: TLS13\n  max_version: TLS12\n"), d)
                .contains("min_version is above max_version")
        );
        assert!(err(&with("  min_version: SSL3\n"), d).contains("unknown TLS version"));
        assert!(err(&with("  curve_preferences: [CurveP999]\n"), d).contains("unknown curve"));
        assert!(err(&with("  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n"), d).contains("none of"));
        for good in [
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  client_allowed_sans: [prometheus.test]\n",
            "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n",
            "  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [x]\n",
            "  client_auth_type: RequestClientCert\n",
            "  min_version: TLS13\n",
            "  min_version: TLS12\n  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]\n  curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: false\n",
        ] {
            from_str(&with(good), d).unwrap_or_else(|e| panic!("{good}: {e:#}"));
        }
        // Weaker than rustls can go: the floor stays TLS 1.2, with a warning.
        let old = from_str(&with("  min_version: TLS10\n"), d).unwrap();
        assert!(old.warnings[0].contains("minimum is TLS 1.2"));
        let v = from_str(&with("  min_version: TLS13\n"), d).unwrap();
        assert!(v
            .tls
            .unwrap()
            .crypto_provider()
            .cipher_suites
            .iter()
            .any(|s| s.tls13().is_some()));
    }

    /// cipher_suites and curve_preferences keep what rustls offers in the
    /// file's order (TLS 1.3 suites stay on, first); a name rustls lacks is
    /// skipped with a warning, and a list of nothing rustls offers fails.
    #[test]
    fn tls_lists_keep_what_rustls_offers_in_the_files_order() {
        let pki = pki();
        let d = pki.path();
        let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
        let c = from_str(
            &format!(
                "{tls}  cipher_suites: [TLS_RSA_WITH_AES_128_GCM_SHA256, \
                 TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS13_AES_128_GCM_SHA256, \
                 TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  \
                 curve_preferences: [CurveP521, CurveP384, X25519]\n"
            ),
            d,
        )
        .unwrap();
        assert_eq!(
            c.warnings,
            [
                "tls_server_config.cipher_suites: TLS_RSA_WITH_AES_128_GCM_SHA256 is not offered \
                 by rustls; skipped",
                "tls_server_config.curve_preferences: CurveP521 is not offered by rustls; skipped",
            ]
        );
        let config = c.tls.unwrap();
        let p = config.crypto_provider();
        let suites: Vec<String> = p
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_none())
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(
            suites,
            [
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        let tls13 = |s: &&rustls::SupportedCipherSuite| s.tls13().is_some();
        let first = p.cipher_suites.iter().take_while(tls13).count();
        let all = provider().cipher_suites.iter().filter(tls13).count();
        assert_eq!(first, all, "TLS 1.3's suites stay on, first");
        let groups: Vec<_> = p.kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(
            groups,
            [rustls::NamedGroup::secp384r1, rustls::NamedGroup::X25519]
        );
        assert!(err(&format!("{tls}  curve_preferences: [CurveP521]\n"), d)
            .contains("curve_preferences: none of [\"CurveP521\"] is offered by rustls"));
    }

    #[test]
    fn passwords_are_checked_against_bcrypt_hashes() {
        let hash = bcrypt::hash_with_salt("s3cret", 4, [7; 16])
            .unwrap()
            .format_for_version(bcrypt::Version::TwoY);
        let text = format!("basic_auth_users:\n  prom: '{hash}'\n  other: '{hash}'\n");
        let c = from_str(&text, Path::new("/")).unwrap();
        assert!(check_password_in(&c.users, "prom", "s3cret"));
        assert!(!check_password_in(&c.users, "prom", "s3cret "));
        assert!(
            !check_password_in(&c.users, "nobody", "s3cret"),
            "unknown user with a known password"
        );
        assert!(!check_password_in(&BTreeMap::new(), "prom", "s3cret"));
        assert_ne!(cache_key("a", "bc"), cache_key("ab", "c"));
    }
}
