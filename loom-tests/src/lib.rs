//! Empty: the loom models live in `tests/`.
