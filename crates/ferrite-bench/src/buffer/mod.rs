//! The buffer manager's evaluation (thesis ch. 2, §5 and appendix A), behind
//! `ferrite bench buffer …`:
//!
//! * [`ycsb`] (with [`zipf`]): YCSB-RO, YCSB-R/W, YCSB-SCAN on 4-byte keys and
//!   ten 100-byte fields, Zipf z = 1;
//! * [`tpcc`]: TPC-C with all five transactions on the transactional
//!   ordered-KV interface ([`txn`]);
//! * [`cgroup`]: memory budgets for the outside anchors' child processes.

pub mod anchor;
pub mod cgroup;
pub mod designs;
pub mod tpcc;
pub mod txn;
pub mod ycsb;
pub mod zipf;
