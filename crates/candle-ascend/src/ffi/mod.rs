//! The C ABI of ACL and aclnn: types and enum values (`types`), and the run-time loader of
//! the toolkit's libraries (`loader`). Nothing here links against CANN.
pub mod loader;
pub mod types;

pub use loader::Toolkit;
