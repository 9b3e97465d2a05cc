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
