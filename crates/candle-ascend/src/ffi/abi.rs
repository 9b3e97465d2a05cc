//! The C ABI class of an aclnn phase-1 parameter, and the check every launch makes: the Rust
//! types a call site passes against the prototype that the vendor's header declares
//! (`soc/cann/aclnn_prototypes.tsv`, extracted from CANN's `aclnn_*.h` by `tools/cann_facts.py`).

/// What one parameter is at the C ABI: which opaque handle, or which scalar width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AbiClass {
    /// `aclTensor *` (const or not).
    Tensor,
    /// `aclScalar *`.
    Scalar,
    /// `aclIntArray *`.
    IntArray,
    /// `aclBoolArray *`.
    BoolArray,
    /// `aclTensorList *`.
    TensorList,
    /// `char *`.
    Str,
    /// `bool`.
    Bool,
    /// `int8_t`.
    I8,
    /// `int32_t`, or an enum such as `aclDataType`.
    I32,
    /// `int64_t`.
    I64,
    /// `uint64_t`.
    U64,
    /// `float`.
    F32,
    /// `double`.
    F64,
}

impl AbiClass {
    /// The class of a C parameter type as the vendor's headers spell it (`const aclTensor *`,
    /// `int64_t`, …; qualifiers and spacing aside); `None` for a type this check does not know.
    pub fn of_c_type(c_type: &str) -> Option<Self> {
        let words: Vec<&str> = c_type.split_whitespace().filter(|w| *w != "const").collect();
        let compact: String = words.join(" ").replace(" *", "*").replace("* ", "*");
        Some(match compact.as_str() {
            "aclTensor*" => Self::Tensor,
            "aclScalar*" => Self::Scalar,
            "aclIntArray*" => Self::IntArray,
            "aclBoolArray*" => Self::BoolArray,
            "aclTensorList*" => Self::TensorList,
            "char*" => Self::Str,
            "bool" => Self::Bool,
            "int8_t" => Self::I8,
            "int32_t" | "aclDataType" => Self::I32,
            "int64_t" => Self::I64,
            "uint64_t" => Self::U64,
            "float" => Self::F32,
            "double" => Self::F64,
            _ => return None,
        })
    }

    /// The class of a Rust parameter type as a call site spells it (the backend's aliases: `T`
    /// tensor, `S` scalar, `A`/`I` int array, `B` bool array, `C` C string); `None` for a spelling
    /// this check does not know, which is refused rather than guessed.
    pub fn of_rust_type(spelling: &str) -> Option<Self> {
        let compact: String = spelling.chars().filter(|c| !c.is_whitespace()).collect();
        Some(match compact.as_str() {
            "T" | "AclTensorPtr" => Self::Tensor,
            "S" | "AclScalarPtr" => Self::Scalar,
            "A" | "I" | "AclIntArrayPtr" => Self::IntArray,
            "B" | "AclBoolArrayPtr" => Self::BoolArray,
            "C" | "*conststd::ffi::c_char" | "*constc_char" => Self::Str,
            "bool" => Self::Bool,
            "i8" => Self::I8,
            "i32" => Self::I32,
            "i64" => Self::I64,
            "u64" => Self::U64,
            "f32" => Self::F32,
            "f64" => Self::F64,
            _ => return None,
        })
    }
}

/// A Rust declaration of a C function: its name, parameter types and return type (empty for
/// none), spelled as in the source.
pub type RustSignature = (&'static str, &'static [&'static str], &'static str);

/// The ABI class of a runtime function's Rust parameter or return type, in the words of
/// `soc/cann/runtime_prototypes.tsv` (`ptr`, `i32`, `usize`, …, `void`); `None` for a spelling
/// this check does not know.
pub fn runtime_class(spelling: &str) -> Option<&'static str> {
    let compact: String = spelling.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.starts_with('*') {
        return Some("ptr");
    }
    Some(match compact.as_str() {
        "" | "()" => "void",
        "AclrtStream" | "AclrtEvent" | "AclTensorPtr" | "AclScalarPtr" | "AclIntArrayPtr" | "AclBoolArrayPtr"
        | "AclExecutorPtr" | "HcclComm" => "ptr",
        "AclError" | "AclnnStatus" | "i32" | "c_int" => "i32",
        "u32" => "u32",
        "i64" => "i64",
        "u64" => "u64",
        "usize" => "usize",
        "bool" => "bool",
        "i8" => "i8",
        "f32" => "f32",
        "f64" => "f64",
        _ => return None,
    })
}

/// Why a call site's parameter types do not fit the vendor's prototype of `op`, if they do not.
pub fn mismatch(op: &str, declared: Option<&[AbiClass]>, passed: &[&str]) -> Option<String> {
    let Some(declared) = declared else {
        return Some(format!("{op} is not declared by the toolkit's headers this backend follows"));
    };
    let classes: Vec<Option<AbiClass>> = passed.iter().map(|t| AbiClass::of_rust_type(t)).collect();
    if classes.len() == declared.len() && classes.iter().zip(declared).all(|(c, d)| *c == Some(*d)) {
        return None;
    }
    Some(format!(
        "the call site passes ({}) but the vendor's {op}GetWorkspaceSize takes ({}) before the workspace size and executor",
        passed.join(", "),
        declared.iter().map(|d| format!("{d:?}")).collect::<Vec<_>>().join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_site_must_match_the_declared_classes_exactly() {
        let declared = [AbiClass::Tensor, AbiClass::Scalar, AbiClass::Tensor];
        assert_eq!(mismatch("aclnnMuls", Some(&declared), &["T", "S", "T"]), None);
        assert!(mismatch("aclnnMuls", Some(&declared), &["T", "T", "T"]).is_some());
        assert!(mismatch("aclnnMuls", Some(&declared), &["T", "S"]).is_some());
        assert!(mismatch("aclnnMuls", Some(&declared), &["T", "Unknown", "T"]).is_some());
        assert!(mismatch("aclnnSquare", None, &["T", "T"]).unwrap().contains("not declared"));
        assert_eq!(AbiClass::of_rust_type("* const std :: ffi :: c_char"), Some(AbiClass::Str));
        assert_eq!(runtime_class("*mut *mut c_void"), Some("ptr"));
        assert_eq!(runtime_class("AclError"), Some("i32"));
        assert_eq!(runtime_class(""), Some("void"));
        assert_eq!(runtime_class("HcclRootInfo"), None);
    }
}
