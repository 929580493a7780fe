//! Reusable pieces of the reference programs.
//!
//! No unsafe code, except where the perftest tools post borrowed work requests as perftest
//! does (each such function allows it, with its safety argument).
#![deny(unsafe_code)]

pub mod devinfo;
pub mod echo;
pub mod perftest;
pub mod pingpong;
pub mod rping;
