//! The one connection type.
