//! Empty library target: lets tracer-user depend on this crate so cargo rebuilds it when the
//! kernel programs change (the programs are the `tracer` binary target).
#![no_std]
