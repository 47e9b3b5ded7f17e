//! Integration tests for pktrace (root, lab namespaces): see `tests/`.
