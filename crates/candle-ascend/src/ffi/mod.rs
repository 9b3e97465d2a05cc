//! The C ABI of ACL, aclnn, HCCL and the driver's DCMI: types and enum values (`types`), the run-time loader of
//! the toolkit's libraries (`loader`) and HCCL's and DCMI's entry points (`hccl`, `dcmi`). Nothing here links
//! against CANN.
pub mod abi;
pub mod dcmi;
pub mod hccl;
mod library;
pub mod loader;
pub mod types;

pub use loader::Toolkit;
