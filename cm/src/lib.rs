//! cm
