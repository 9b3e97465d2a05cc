//! What the benchmarks share: the devices they compare and the modelled Ascend times.
#![allow(dead_code)] // each bench uses its own subset

pub mod devices;
pub mod modelled;
