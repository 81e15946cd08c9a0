//! The message factory.
