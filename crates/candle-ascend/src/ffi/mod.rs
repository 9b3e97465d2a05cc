//! The C ABI of ACL, aclnn and HCCL: types and enum values (`types`), the run-time loader of
//! the toolkit's libraries (`loader`) and HCCL's entry points (`hccl`). Nothing here links
//! against CANN.
pub mod abi;
pub mod hccl;
pub mod loader;
pub mod types;

pub use loader::Toolkit;
