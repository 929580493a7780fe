//! The borrow rules of posting, proven by programs that must not compile
//! (`tests/compile-fail/*.rs`, each with the expected error next to it).
#[test]
fn posting_rules_are_enforced_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}
