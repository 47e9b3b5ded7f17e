//! The filter expression on the command line, without root: a bad expression is a usage error
//! (exit 2) that shows where it went wrong, before pktrace resolves the pod or touches the
//! kernel.

mod common;

use common::run;

#[test]
fn a_bad_expression_exits_2_with_its_position_and_a_caret() {
    // The pod does not exist: were the expression not checked first, that would be the error.
    let (code, out, err) = run(&["--pod", "no-such-pod", "udp", "port", "x53", "-c", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "pktrace: bad expression at 10: expected a port number after \"port\"",
            "  udp port x53",
            "           ^",
        ],
        "{err}"
    );

    let (code, _, err) = run(&["--pod-ip", "10.0.0.1", "tcp and (port 80"]);
    assert_eq!(code, 2, "{err}");
    let caret = err.lines().nth(2).expect("a caret line");
    assert_eq!(caret.find('^'), Some(2 + "tcp and (port 80".len()), "{err}");

    let (code, _, err) = run(&["--pod-ip", "10.0.0.1", "ether", "host", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("pktrace: bad expression at 1: \"ether\" is not supported"),
        "{err}"
    );

    let (code, _, err) = run(&["--pod-ip", "10.0.0.1", "icmp and port 53"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("matches no packet"), "{err}");
}

#[test]
fn help_offers_the_expression_and_the_line_output() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("[EXPRESSION]..."), "{out}");
    assert!(out.contains("pktrace --pod ubuntu udp port 53"), "{out}");
    assert!(out.contains("line: One line per journey"), "{out}");
}
