//! Reusable pieces of the reference programs.
#![forbid(unsafe_code)]

pub mod echo;
pub mod pingpong;
pub mod rping;
