//! Arbitrary bytes as the Azure CNI state file (`/var/run/azure-vnet.json`), through the
//! parser `pktrace --pod` uses, then every lookup a user could make.
//!
//! What must hold: no panic; an error is `Corrupt` (reading is not fuzzed here); the pods come
//! out sorted, unique, named, with unique addresses; each is found by its own name (or has no
//! address yet); and every message — not found, did you mean, other namespaces, the pods of a
//! namespace, no address, corrupt — is one line in which no name from the file can move the
//! cursor, recolour the terminal or reorder text (`util::safe` everywhere), as is the pod's
//! label once escaped for the start-up line and the text summary.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pktrace_fuzz::terminal_safe;
use tracer_user::{resolve::state_file, util::safe};

/// Lookups per input (each parses the file again).
const LOOKUPS: usize = 6;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("/var/run/azure-vnet.json");
    let pods = match state_file::parse_pods(path, data) {
        Ok(pods) => pods,
        Err(e) => {
            assert!(
                matches!(e, state_file::StateFileError::Corrupt { .. }),
                "{e:?}"
            );
            assert_one_safe_line(&e.to_string());
            return;
        }
    };
    for pair in pods.windows(2) {
        let key = |p: &state_file::PodTarget| (p.namespace.clone(), p.name.clone());
        assert!(key(&pair[0]) < key(&pair[1]), "not sorted or not unique");
    }
    for pod in &pods {
        assert!(!pod.name.is_empty() && !pod.namespace.is_empty());
        for (i, ip) in pod.ips.iter().enumerate() {
            assert!(!pod.ips[..i].contains(ip), "duplicate address {ip}");
        }
        assert_one_safe_line(&safe(&pod.label()));
    }
    for pod in pods.iter().take(LOOKUPS) {
        match state_file::find_pod(path, data, &pod.namespace, &pod.name) {
            Ok(found) => assert_eq!(&found, pod),
            Err(e @ state_file::StateFileError::NoAddress { .. }) => {
                assert!(pod.ips.is_empty());
                assert_one_safe_line(&e.to_string());
            }
            Err(e) => panic!("{} not found: {e}", pod.label()),
        }
        // Near misses: a typo (did you mean …), another namespace (use -n …), an empty name.
        let typo = format!("{}x", pod.name);
        let other_ns = format!("{}-other", pod.namespace);
        let lookups = [
            (pod.namespace.as_str(), typo.as_str()),
            (other_ns.as_str(), pod.name.as_str()),
            (pod.namespace.as_str(), ""),
        ];
        for (namespace, name) in lookups {
            if let Err(e) = state_file::find_pod(path, data, namespace, name) {
                assert!(e.is_usage() || matches!(e, state_file::StateFileError::NoAddress { .. }));
                assert_one_safe_line(&e.to_string());
            }
        }
    }
    if pods.is_empty() {
        let e = state_file::find_pod(path, data, "default", "ubuntu").unwrap_err();
        assert!(e.is_usage());
        assert_one_safe_line(&e.to_string());
    }
});

fn assert_one_safe_line(msg: &str) {
    assert!(terminal_safe(msg), "unsafe for a terminal: {msg:?}");
}
