//! Reusable pieces of the reference programs.
#![forbid(unsafe_code)]

pub mod devinfo;
pub mod echo;
pub mod perftest;
pub mod pingpong;
pub mod report;
pub mod rping;
