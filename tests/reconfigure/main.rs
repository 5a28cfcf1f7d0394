//! Reconfiguration (`Bucket::set_quota`, `Smooth::set_rate`): the window bound across a switch,
//! readers racing two switches, and the writer lock.

mod readers;
mod window_bound;
mod writer_lock;
