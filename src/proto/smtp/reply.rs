//! Client side: parsing of server replies.
