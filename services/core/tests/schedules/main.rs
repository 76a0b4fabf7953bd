//! The schedule maths against outside references, one test binary (see
//! docs/testing.md on why binaries are few): `conformance` compares next
//! fires with an independent reference, `dst_properties` checks the DST
//! rule's invariants over every zone that changes offset in 2025-2035.

mod conformance;
mod dst_properties;
