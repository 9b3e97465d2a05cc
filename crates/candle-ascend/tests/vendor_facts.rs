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
