//! Reusable pieces of the reference programs.
#![forbid(unsafe_code)]

pub mod pingpong;
pub mod rping;
