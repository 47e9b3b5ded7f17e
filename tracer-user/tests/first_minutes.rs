//! What a new user meets before tracing anything, through the binary and without root: help
//! that fits the terminal, usage errors in one style with the fix, completions without the
//! packaging flag.

mod common;

use common::run_with as run;

#[test]
fn help_fits_80_columns_and_color_never_has_no_escapes() {
    for flag in ["-h", "--help"] {
        let (code, out, _) = run(&[flag, "--color", "never"], &[("COLUMNS", "80")]);
        assert_eq!(code, 0);
        assert!(
            out.contains("What to trace:") && !out.contains('\x1b'),
            "{out}"
        );
        for line in out.lines() {
            assert!(line.chars().count() <= 80, "{flag}: {line:?}");
        }
    }
}

#[test]
fn usage_errors_are_one_style_with_the_fix_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[],
            "pktrace: nothing to trace: say what to trace: --pod NAME",
        ),
        (&["ubuntu"], "if it is a pod, write --pod ubuntu"),
        (
            &["--pod", "x", "-nn"],
            "pktrace: '-nn' would be namespace 'n'",
        ),
        (
            &["-c", "0", "--pod-ip", "10.0.0.1"],
            "pktrace: -c/--count: -c 0 would stop",
        ),
        (
            &["--pod-ip", "10.0.0.1,foo"],
            "pktrace: --pod-ip: 'foo' is not an IP address",
        ),
        (
            &["--pod-ip", "10.0.0.1", "tcp[13] = 2"],
            "\"[\" is not supported",
        ),
        (
            &["--pod", "x", "--bogus"],
            "pktrace: unknown option '--bogus'",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = run(args, &[("COLUMNS", "80")]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.starts_with("pktrace: "), "{args:?}: {err}");
        // Off a terminal a message stays whole (diag's tests wrap it on one).
        assert!(
            err.lines().next().is_some_and(|l| l.len() > 20),
            "{args:?}: {err}"
        );
        for raw in ["error:", "\x1b[", "For more information"] {
            assert!(!err.contains(raw), "{args:?}: {err}");
        }
    }
}

#[test]
fn completions_do_not_offer_the_packaging_flag() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(&["--generate", shell], &[]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("--pod-ip") || out.contains("pod-ip"),
            "{shell}"
        );
        assert!(!out.contains("generate"), "{shell} offers --generate");
    }
}
