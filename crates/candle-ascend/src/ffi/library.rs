//! One shape for a vendor library loaded at run time: a struct of resolved entry points, their
//! names, and their Rust signatures for `tests/vendor_facts.rs` to compare with the vendor's
//! headers (`soc/cann/runtime_prototypes.tsv`).

/// Declares `$api`: `load(path)` opens the library and resolves every entry point, or fails
/// naming the one that is missing.
macro_rules! library_api {
    ($(#[$doc:meta])* $api:ident { $($name:ident : fn($($arg:ty),*) $(-> $ret:ty)?;)* }) => {
        $(#[$doc])*
        #[allow(non_snake_case, missing_docs)]
        pub struct $api {
            _lib: libloading::Library,
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl $api {
            /// The entry points' names.
            pub const NAMES: &[&str] = &[$(stringify!($name)),*];

            /// Each entry point's Rust parameter and return types as declared here, which
            /// tests/vendor_facts.rs compares with the vendor's header (`soc/cann/runtime_prototypes.tsv`).
            pub const SIGNATURES: &[crate::ffi::abi::RustSignature] =
                &[$((stringify!($name), &[$(stringify!($arg)),*], stringify!($($ret)?))),*];

            /// Load `path` and resolve every entry point.
            #[allow(non_snake_case)]
            pub fn load(path: &std::path::Path) -> crate::error::Result<Self> {
                // SAFETY: loading the library runs its initialisers, which have no preconditions.
                let lib = unsafe { libloading::Library::new(path) }
                    .map_err(|source| crate::error::AscendError::Library { path: path.to_path_buf(), source })?;
                $(
                    // SAFETY: the symbol's type is the C prototype declared above.
                    let $name = *unsafe { lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(stringify!($name).as_bytes()) }
                        .map_err(|_| crate::error::AscendError::MissingSymbol {
                            library: path.display().to_string(),
                            symbol: stringify!($name).into(),
                        })?;
                )*
                Ok(Self { _lib: lib, $($name,)* })
            }
        }
    };
}

pub(crate) use library_api;
