//! The concurrency-control protocols. Each is one module; [`crate::Protocol`] names them.

pub(crate) mod ford;
pub(crate) mod motor;
