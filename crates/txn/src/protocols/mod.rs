//! The concurrency-control protocols, one module each, named in `registry.rs`.

pub(crate) mod calvin;
pub(crate) mod drtmh;
pub(crate) mod farm;
pub(crate) mod ford;
pub(crate) mod motor;
pub(crate) mod mvcc;
pub(crate) mod scythe;
pub(crate) mod sundial;
pub(crate) mod two_pl;
