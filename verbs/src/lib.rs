//! verbs
