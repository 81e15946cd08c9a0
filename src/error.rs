//! The two kinds of failure a command ends with, and their exit codes: the user's input
//! was wrong (exit 2), or the run failed (exit 1).

/// The exit status of a run that did what it was asked and broke only its thresholds
/// (`--threshold`, a scenario's): apart from 1 (the run itself failed: nothing accepted,
/// most units failed, a delivery check failed, a fault not applied), as k6 does.
pub const THRESHOLDS_FAILED: u8 = 99;

/// An error the user caused (bad option value, unreadable file, bad scenario). Exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Shorthand to return a usage error from anywhere.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(msg.into()).into())
}

/// The exit code of an error (2 for the user's input, 1 otherwise) and its one line: the
/// outermost context plus its causes, no backtrace.
pub fn report(e: &anyhow::Error) -> (u8, String) {
    let code = if e.downcast_ref::<UsageError>().is_some()
        || e.downcast_ref::<crate::units::UnitError>().is_some()
    {
        2
    } else {
        1
    };
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        line.push_str(": ");
        line.push_str(&cause.to_string());
    }
    (code, line)
}
