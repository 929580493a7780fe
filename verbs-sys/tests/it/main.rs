//! Integration tests of `verbs-sys` (one binary, one module per area).

mod smoke;
