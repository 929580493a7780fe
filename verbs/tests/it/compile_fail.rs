//! The borrow rules of posting, proven by programs that must not compile
//! (`tests/compile-fail/*.rs`, each with the expected error next to it).
//!
//! This needs a Rust toolchain at run time; `cargo test` provides one (it sets `CARGO`). Inside
//! the device-test guest there is none, so there the test says it is skipped; the host tier
//! runs it.
#[test]
fn posting_rules_are_enforced_at_compile_time() {
    if std::env::var_os("CARGO").is_none() {
        testkit::skip(
            "compile_fail::posting_rules_are_enforced_at_compile_time",
            "no Rust toolchain here (CARGO unset); the host tier runs this test",
        );
        return;
    }
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}
