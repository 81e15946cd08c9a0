//! Ctrl-C and SIGTERM.

/// Ctrl-C and SIGTERM as one stream.
pub struct Signals {
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn new() -> Self {
        Signals {
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    pub async fn recv(&mut self) {
        let term = async {
            match &mut self.term {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}
