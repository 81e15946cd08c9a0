//! Client identities: the certificate and key a connection presents, one TLS
//! configuration each (its own session cache, so resumption never crosses identities).

use std::path::Path;
use std::sync::Arc;

use crate::tls::{client_config, ClientOptions};

/// Most identities `--identities DIR` may hold.
pub const MAX_IDENTITIES: usize = 10_000;

/// One client identity.
#[derive(Debug, Clone)]
pub struct Identity {
    /// What `{identity}` is filled with: the file name without its extension.
    pub name: String,
    pub config: Arc<rustls::ClientConfig>,
}

/// The TLS configuration with `base`'s trust, client certificate (if any) and resumption.
pub fn single(base: &ClientOptions) -> Result<Identity, String> {
    let config = client_config(base).map_err(|e| e.to_string())?;
    let name = base
        .client_cert
        .as_deref()
        .map(|c| stem(Path::new(c)))
        .unwrap_or_default();
    Ok(Identity { name, config })
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every identity in `dir`: NAME.key with NAME.crt or NAME.pem next to it (PEM; the
/// certificate file may hold the chain). A key without a certificate, or a certificate
/// without a key, is an error: a half identity is a mistake, not something to skip.
pub fn from_dir(dir: &Path, base: &ClientOptions) -> Result<Vec<Identity>, String> {
    let at = |e: String| format!("--identities {}: {e}", dir.display());
    let rd = std::fs::read_dir(dir).map_err(|e| at(e.to_string()))?;
    let mut files: Vec<_> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .take(3 * MAX_IDENTITIES + 1)
        .collect();
    files.sort();
    let ext = |p: &Path| p.extension().map(|e| e.to_string_lossy().into_owned());
    let mut out = Vec::new();
    for key in files.iter().filter(|p| ext(p).as_deref() == Some("key")) {
        let name = stem(key);
        let cert = ["crt", "pem"]
            .iter()
            .map(|e| key.with_extension(e))
            .find(|c| c.is_file())
            .ok_or_else(|| at(format!("{name}.key has no {name}.crt or {name}.pem")))?;
        let opts = ClientOptions {
            client_cert: Some(cert.to_string_lossy().into_owned()),
            client_key: Some(key.to_string_lossy().into_owned()),
            ..base.clone()
        };
        let config = client_config(&opts).map_err(|e| at(e.to_string()))?;
        out.push(Identity { name, config });
        if out.len() > MAX_IDENTITIES {
            return Err(at(format!("more than {MAX_IDENTITIES} identities")));
        }
    }
    for cert in files
        .iter()
        .filter(|p| matches!(ext(p).as_deref(), Some("crt" | "pem")))
    {
        if !cert.with_extension("key").is_file() {
            return Err(at(format!(
                "{} has no {}.key",
                cert.file_name().unwrap_or_default().to_string_lossy(),
                stem(cert)
            )));
        }
    }
    if out.is_empty() {
        return Err(at(
            "no identity in it (NAME.crt or NAME.pem with NAME.key)".into()
        ));
    }
    Ok(out)
}
