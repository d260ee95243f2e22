//! (in progress)
use crate::{WlRng, Workload, WorkloadError};
use dtxn_fabric::Pool;
use dtxn_store::{Plan, TableSpec};
use dtxn_txn::{Abort, Coordinator};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Options {
    pub subscribers: u64,
    pub warehouses: u32,
    pub new_orders_per_district: u64,
}
impl Options {
    pub fn spec() -> Options {
        Options::default()
    }
    pub fn room_for(_: Option<u64>, _: u32) -> u64 {
        0
    }
}
pub struct Tpcc {
    o: Options,
}
impl Tpcc {
    pub fn new(_: Options) -> Result<Tpcc, WorkloadError> {
        Err(WorkloadError::Options("not yet".into()))
    }
    pub fn options(&self) -> &Options {
        &self.o
    }
}
impl Workload for Tpcc {
    type Tally = ();
    fn name(&self) -> &'static str {
        "x"
    }
    fn txn_types(&self) -> &'static [&'static str] {
        &["x"]
    }
    fn tables(&self) -> Vec<TableSpec> {
        vec![]
    }
    fn load(&self, _: &Pool, _: &Plan, _: u64) -> Result<(), WorkloadError> {
        Ok(())
    }
    fn tally(&self, _: bool) {}
    async fn run_one(
        &self,
        _: &mut Coordinator,
        _: &mut WlRng,
        _: &mut (),
    ) -> (usize, Result<(), Abort>) {
        (0, Ok(()))
    }
    fn verify(&self, _: &Pool, _: &Plan, _: u64, _: &[()]) -> Result<Vec<String>, WorkloadError> {
        Ok(vec![])
    }
}
