//! Server side: parsing of client commands.
