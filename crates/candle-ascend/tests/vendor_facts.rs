//! The vendor facts the backend and the emulator follow (`soc/cann/*.tsv`, extracted from the CANN
//! 8.1.RC1 toolkit tree by `tools/cann_facts.py`): every launched op has the vendor's phase-1
//! prototype, the emulator reports that toolkit's version, and its parts' HBM is the platform
//! files' figure.
use candle_ascend::soc::AclnnOp;

#[test]
fn every_op_but_square_has_the_vendors_phase_one_prototype() {
    let undeclared: Vec<&str> =
        AclnnOp::ALL.iter().filter(|op| op.phase1_abi().is_none()).map(|op| op.name()).collect();
    // aclnnSquare runs on Ascend 950 only and is not in CANN 8.1.RC1; the backend composes sqr.
    assert_eq!(undeclared, ["aclnnSquare"]);
    use candle_ascend::ffi::abi::AbiClass::*;
    assert_eq!(AclnnOp::Add.phase1_abi(), Some(&[Tensor, Tensor, Scalar, Tensor][..]));
    assert_eq!(AclnnOp::Cast.phase1_abi(), Some(&[Tensor, I32, Tensor][..]));
    assert_eq!(AclnnOp::GeluBackwardV2.phase1_abi(), Some(&[Tensor, Tensor, Str, Tensor][..]));
}

#[test]
fn the_emulator_follows_cann_8_1_rc1_and_its_platform_files() {
    let dev = candle_ascend::parse_device("npu-sim:0").unwrap();
    let ascend = candle_ascend::ascend_device(&dev).unwrap();
    assert_eq!(ascend.toolkit().version().as_deref(), Some("8.1.RC1"));
    // memory_size=68719476736 in Ascend910B3.ini (the default part); the 910A's file has none, so
    // its 32 GB comes from the card's specification.
    let expected = match ascend.soc().name.as_str() {
        "Ascend910B3" => 68_719_476_736,
        "Ascend910A" => 34_359_738_368,
        other => panic!("no expected HBM for {other}"),
    };
    let (_free, total) = ascend.memory_info().unwrap();
    assert_eq!(total, expected);
}

/// A copy of the emulated toolkit's root, with the aclnn headers written from the fact table.
fn toolkit_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("toolkit");
    std::fs::create_dir_all(root.join("lib64")).unwrap();
    let sim = candle_ascend::emulated_root();
    for entry in std::fs::read_dir(sim.join("lib64")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, root.join("lib64").join(path.file_name().unwrap())).unwrap();
    }
    std::fs::copy(sim.join("version.cfg"), root.join("version.cfg")).unwrap();
    let table = include_str!("../soc/cann/aclnn_prototypes.tsv");
    let mut header = String::from("// written by the test from soc/cann/aclnn_prototypes.tsv\n");
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        if fields.len() == 3 && fields[2] != "-" {
            let params: Vec<String> =
                fields[2].split(',').enumerate().map(|(i, t)| format!("{} p{i}", t.trim())).collect();
            header.push_str(&format!("aclnnStatus {}GetWorkspaceSize({});\n", fields[0], params.join(", ")));
        }
    }
    std::fs::create_dir_all(root.join("include/aclnnop")).unwrap();
    std::fs::write(root.join("include/aclnnop/aclnn_all.h"), header).unwrap();
    root
}

#[test]
fn the_toolkit_check_passes_the_emulator_and_names_what_a_toolkit_lacks() {
    use candle_ascend::toolkit_check::check_toolkit;
    let report = check_toolkit(&candle_ascend::emulated_root());
    assert!(report.ok(), "{report:?}");
    assert!(report.checked > 150, "{report:?}");

    let dir = tempfile::tempdir().unwrap();
    let root = toolkit_copy(dir.path());
    let report = check_toolkit(&root);
    assert!(report.ok() && report.header_dir.is_some(), "{report:?}");
    assert_eq!(report.version.as_deref(), Some("8.1.RC1"));

    // One prototype changed in the header: aclnnMuls's scalar becomes a tensor.
    let header = root.join("include/aclnnop/aclnn_all.h");
    let text = std::fs::read_to_string(&header).unwrap();
    let changed = text.replace(
        "aclnnMulsGetWorkspaceSize(const aclTensor * p0, const aclScalar * p1",
        "aclnnMulsGetWorkspaceSize(const aclTensor * p0, const aclTensor * p1",
    );
    assert_ne!(changed, text);
    std::fs::write(&header, changed).unwrap();
    // One library gone.
    std::fs::remove_file(root.join("lib64/libhccl.so")).unwrap();
    let report = check_toolkit(&root);
    assert!(!report.ok());
    assert_eq!(report.mismatched.len(), 1, "{:?}", report.mismatched);
    assert!(
        report.mismatched[0].starts_with("aclnnMuls: the header declares (Tensor, Tensor, Tensor)"),
        "{:?}",
        report.mismatched
    );
    assert_eq!(report.missing.len(), 1, "{:?}", report.missing);
    assert!(report.missing[0].starts_with("libhccl.so"), "{:?}", report.missing);
}

/// `soc/cann/runtime_prototypes.tsv`'s rows: (function, return class, parameter classes).
fn runtime_prototypes() -> Vec<(String, String, Vec<String>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("soc/cann/runtime_prototypes.tsv");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(" | ").collect();
            let params = if f[4] == "-" { Vec::new() } else { f[4].split(' ').map(str::to_string).collect() };
            (f[0].to_string(), f[3].to_string(), params)
        })
        .collect()
}

#[test]
fn every_runtime_hccl_dcmi_and_phase_two_declaration_has_the_vendors_abi() {
    use candle_ascend::ffi::abi::{runtime_class, RustSignature};
    use candle_ascend::ffi::{dcmi::DcmiApi, hccl::HcclApi, loader::RuntimeApi, types::PHASE2_SIGNATURE};
    let table = runtime_prototypes();
    let classes = |sig: &RustSignature| {
        let params: Vec<String> = sig
            .1
            .iter()
            .map(|t| runtime_class(t).unwrap_or_else(|| panic!("{}: unknown type {t}", sig.0)).into())
            .collect();
        (runtime_class(sig.2).unwrap_or_else(|| panic!("{}: unknown type {}", sig.0, sig.2)).to_string(), params)
    };
    let mut checked = 0;
    for sig in RuntimeApi::SIGNATURES.iter().chain(HcclApi::SIGNATURES).chain(DcmiApi::SIGNATURES) {
        let row = table.iter().find(|r| r.0 == sig.0).unwrap_or_else(|| panic!("{} is not in the table", sig.0));
        assert_eq!(classes(sig), (row.1.clone(), row.2.clone()), "{} differs from the vendor's header", sig.0);
        checked += 1;
    }
    // Every op's phase 2 has the one shape `Phase2` declares, except one CANN 8.1.RC1 lacks.
    let phase2 = classes(&PHASE2_SIGNATURE);
    for op in AclnnOp::ALL {
        let row =
            table.iter().find(|r| r.0 == op.name()).unwrap_or_else(|| panic!("{} is not in the table", op.name()));
        if row.1 == "-" {
            assert_eq!(op.name(), "aclnnSquare");
            continue;
        }
        assert_eq!(phase2, (row.1.clone(), row.2.clone()), "{}'s phase 2 differs from Phase2", op.name());
        checked += 1;
    }
    assert_eq!(
        checked,
        RuntimeApi::SIGNATURES.len() + HcclApi::SIGNATURES.len() + DcmiApi::SIGNATURES.len() + AclnnOp::ALL.len() - 1
    );
}

#[test]
fn every_support_entry_has_an_engine_from_the_kernel_tables() {
    // build.rs places all 1,005 (op, family, dtype) entries of soc/op_support.tsv or stops the
    // build; 238 run on the AI CPU and 12 rest on the aclnn document alone (docs/ascend.md).
    assert_eq!(candle_ascend::soc::ENGINE_COUNTS, (238, 12));
    use candle_ascend::ffi::types::dtype;
    use candle_ascend::{Engine, Soc};
    let (a, b) = (Soc::new("Ascend910A"), Soc::new("Ascend910B3"));
    assert_eq!(a.engine(AclnnOp::DropoutGenMaskV2, None), Some(Engine::AiCpu));
    assert_eq!(b.engine(AclnnOp::DropoutGenMaskV2, None), Some(Engine::Dsa));
    assert_eq!(a.engine(AclnnOp::Cast, Some(dtype::UINT32)), Some(Engine::AiCpu));
    assert_eq!(a.engine(AclnnOp::Cast, Some(dtype::UINT8)), Some(Engine::AiCore));
    assert_eq!(b.engine(AclnnOp::Add, Some(dtype::DOUBLE)), Some(Engine::AiCpu));
    assert_eq!(b.engine(AclnnOp::Add, Some(dtype::BF16)), Some(Engine::AiCore));
    assert_eq!(a.engine(AclnnOp::FlashAttentionScore, Some(dtype::FLOAT16)), None);
}
