//! The embedded server with accounts, for tests that run spate's mailbox and submission
//! commands against it: a users file and the server's CA written into a temporary
//! directory that holds the runs' results too.

use spate::serve::{self, Config, Running, Users};

pub struct Embedded {
    pub server: Running,
    pub dir: tempfile::TempDir,
    /// The users table (`ADDRESS PASSWORD` lines) as a file for `--users-file`.
    pub users_file: String,
    /// The server's certificate, for `--ca`.
    pub ca: String,
}

/// Starts `config` (its listeners set by the caller) with the accounts of `table`.
pub async fn start(mut config: Config, table: &str) -> Embedded {
    config.users = Users::parse(table).unwrap();
    let server = serve::start(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let users_file = dir.path().join("users.txt");
    std::fs::write(&users_file, table).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.cert_pem).unwrap();
    Embedded {
        server,
        users_file: users_file.to_string_lossy().into_owned(),
        ca: ca.to_string_lossy().into_owned(),
        dir,
    }
}

impl Embedded {
    /// `DIR/name`, a results directory for a run.
    pub fn out(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}
