//! Placeholder.
use super::conn::{Conn, ConnError};
use super::Shared;

pub(crate) async fn run(conn: &mut Conn, _sh: &Shared) -> Result<(), ConnError> {
    conn.queue(b"-ERR not yet\r\n");
    Ok(())
}
