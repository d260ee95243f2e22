//! The transaction API: begin, read, read_for_update, update, delete, insert, commit,
//! rollback. A [`Txn`] runs under the protocol its coordinator was configured with; every
//! call goes to that protocol's core (`tx.rs`) through the registry's dispatch.

use crate::abort::{Abort, AbortReason};
use crate::item::Access;
use crate::registry::{dispatch, AnyTxn};

/// Declared up front, as the papers' coordinators do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxKind {
    ReadOnly,
    ReadWrite,
}

/// A transaction in progress. Reads return the value the transaction sees (its own writes
/// included); nothing uncommitted of another transaction is ever visible.
pub struct Txn<'c>(pub(crate) AnyTxn<'c>);

impl Txn<'_> {
    pub fn id(&self) -> u64 {
        dispatch!(&self.0, t => t.id)
    }

    /// The coordinator's endpoint: its clock, RNG and sleep (e.g. think time inside a
    /// transaction, or a scripted interleaving in a test). Ops posted on it directly are
    /// outside the transaction.
    pub fn endpoint(&mut self) -> &mut dtxn_fabric::Endpoint {
        dispatch!(&mut self.0, t => &mut t.c.ep)
    }

    /// An abort of a coordinator whose lease may have expired is `LeaseExpired`, whatever
    /// failed first: it is fenced, and its transaction's outcome is recovery's.
    fn fenced<T>(&mut self, r: Result<T, Abort>) -> Result<T, Abort> {
        let fenced = self.endpoint().fenced();
        r.map_err(|a| {
            if fenced {
                Abort {
                    reason: AbortReason::LeaseExpired,
                    ..a
                }
            } else {
                a
            }
        })
    }

    /// Reads `key` of `table` as a read-only item: `None` if it does not exist.
    pub async fn read(&mut self, table: u32, key: u64) -> Result<Option<&[u8]>, Abort> {
        self.fetch(&[Access::read(table, key)]).await?;
        Ok(self.get(table, key))
    }

    /// Reads `key` of `table` for update (locks it): `None` if it does not exist.
    pub async fn read_for_update(&mut self, table: u32, key: u64) -> Result<Option<&[u8]>, Abort> {
        self.fetch(&[Access::update(table, key)]).await?;
        Ok(self.get(table, key))
    }

    /// Fetches several records in one round trip (per protocol phase); read their values with
    /// [`get`](Self::get).
    pub async fn fetch(&mut self, accesses: &[Access]) -> Result<(), Abort> {
        let r = dispatch!(&mut self.0, t => t.fetch(accesses).await);
        self.fenced(r)
    }

    /// The value of a fetched record as this transaction sees it (`None`: absent or deleted).
    pub fn get(&self, table: u32, key: u64) -> Option<&[u8]> {
        dispatch!(&self.0, t => t.get(table, key))
    }

    /// Replaces the value of a record read for update.
    pub async fn update(&mut self, table: u32, key: u64, value: &[u8]) -> Result<(), Abort> {
        let r = dispatch!(&mut self.0, t => t.update(table, key, value).await);
        self.fenced(r)
    }

    /// Deletes a record read for update.
    pub async fn delete(&mut self, table: u32, key: u64) -> Result<(), Abort> {
        let r = dispatch!(&mut self.0, t => t.delete(table, key).await);
        self.fenced(r)
    }

    /// Inserts a new record. Aborts with `Exists` if the key is present.
    pub async fn insert(&mut self, table: u32, key: u64, value: &[u8]) -> Result<(), Abort> {
        self.insert_many(&[(table, key, value)]).await
    }

    /// Inserts several new records, `(table, key, value)`, in one round trip where their
    /// chains have no overflow buckets (rather than one each): the same as inserting them one
    /// by one, in order. Aborts with `Exists` if a key is present (or given twice).
    pub async fn insert_many(&mut self, rows: &[(u32, u64, &[u8])]) -> Result<(), Abort> {
        let r = dispatch!(&mut self.0, t => t.insert_many(rows).await);
        self.fenced(r)
    }

    /// Validates and commits. `Ok` means durable on every replica and serialized.
    pub async fn commit(mut self) -> Result<(), Abort> {
        let r = dispatch!(&mut self.0, t => t.commit().await);
        self.fenced(r)
    }

    /// The application's own rollback: releases everything, changes nothing.
    pub async fn rollback(mut self) {
        dispatch!(&mut self.0, t => t.rollback().await)
    }
}
