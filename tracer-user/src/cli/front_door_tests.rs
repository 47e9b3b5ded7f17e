//! The first minutes of a user: `--help` within 80 columns and grouped, usage errors in
//! pktrace's words, tcpdump's and kubectl's habits.

use std::ffi::OsString;

use super::*;

fn argv(args: &[&str]) -> Vec<OsString> {
    std::iter::once("pktrace")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect()
}

fn refused(args: &[&str]) -> String {
    match parse(&argv(args)) {
        Err(Refusal::Usage(message)) => message,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn trace(args: &[&str]) -> Args {
    match parse(&argv(args)) {
        Ok(Parsed::Run(cli)) => cli.trace,
        other => panic!("{args:?}: {other:?}"),
    }
}

#[test]
fn help_fits_80_columns_and_short_help_is_shorter() {
    let short = command().term_width(80).render_help().to_string();
    let long = command().term_width(80).render_long_help().to_string();
    for (name, text) in [("-h", &short), ("--help", &long)] {
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{name}: {line:?}");
        }
    }
    assert!(
        short.lines().count() * 2 < long.lines().count(),
        "-h is a summary"
    );
    assert!(long.contains("Words:") && long.contains("journey    one packet's way"));
    assert!(!short.contains("Words:"));
    // The glossary uses the words of the output.
    for (dnat, reply) in [(true, false), (false, false), (true, true), (false, true)] {
        let word = crate::output::nat_word(dnat, reply);
        assert!(long.contains(word), "{word} missing from the glossary");
    }
    for word in ["step ", "hook ", "drop ", "no answer ", "failure "] {
        assert!(
            long.contains(&format!("\n  {word}")),
            "{word:?} not defined"
        );
    }
}

#[test]
fn help_groups_the_options_with_the_on_call_flags_first() {
    let help = command().term_width(80).render_help().to_string();
    let at = |needle: &str| {
        help.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing:\n{help}"))
    };
    let order = [
        "What to trace:",
        "--pod <NAME>",
        "What to show:",
        "--failures",
        "How long:",
        "--follow",
        "Capture to a pcapng file:",
        "-s, --snaplen",
        "Advanced:",
        "-i, --interfaces",
        "--ready-file",
    ];
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{pair:?}:\n{help}");
    }
}

#[test]
fn tcpdump_hands() {
    let a = trace(&["-i", "eth0", "--pod-ip", "10.0.0.1"]);
    assert_eq!(a.interfaces, Some(vec!["eth0".to_owned()]));
    let a = trace(&["--pod", "x", "-w", "f.pcapng", "-s", "96"]);
    assert_eq!(a.snaplen, 96);
    for habit in ["-nn", "-n", "-nnvv"] {
        let args = ["--pod", "x", habit];
        if habit == "-n" {
            let m = refused(&args);
            assert!(m.contains("-n/--namespace needs a value"), "{m}");
            assert!(m.contains("tcpdump's -n is not needed"), "{m}");
            continue;
        }
        let m = refused(&args);
        assert!(
            m.starts_with(&format!("'{habit}' would be namespace")),
            "{m}"
        );
        assert!(m.contains("leave") && m.contains("kubectl"), "{m}");
    }
    // kubectl's -n stays the namespace.
    assert_eq!(trace(&["--pod", "x", "-n", "shop"]).namespace, "shop");
    let m = refused(&["--pod", "x", "-X"]);
    assert!(m.contains("-w FILE"), "{m}");
    let m = refused(&["--pod", "x", "-s", "96"]);
    assert!(m.contains("add -w FILE.pcapng"), "{m}");
}

#[test]
fn usage_errors_say_what_to_write_in_one_style() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["-c", "0", "--pod-ip", "10.0.0.1"],
            "-c/--count: -c 0 would stop before the first journey",
        ),
        (&["-c", "x", "--pod", "a"], "not a number of journeys"),
        (
            &["--pod", "a", "-d", "soon"],
            "-d/--duration: 'soon' is not a duration",
        ),
        (
            &["--pod", "a", "-o", "yaml"],
            "'yaml' is not a value of -o/--output: give one of text, json, line",
        ),
        (
            &["--pod", "a", "--pod-ip", "10.0.0.1"],
            "cannot go together: trace a pod (--pod), addresses",
        ),
        (
            &["--pod", "a", "--folow"],
            "unknown option '--folow': did you mean '--follow'?",
        ),
        (
            &["--pod", "a", "--bogus"],
            "unknown option '--bogus': pktrace -h lists the options",
        ),
        (
            &["--pod", "a", "-w", "f", "-s", "300"],
            "300 bytes is more than pktrace keeps",
        ),
        (&["--pod", "a", "-c"], "-c/--count needs a value: -c N"),
        (
            &["--pod", "a", "--pod", "b"],
            "--pod is given twice: give it once",
        ),
        (&["merge"], "pktrace merge needs the files to merge"),
    ];
    for (args, want) in cases {
        let m = refused(args);
        assert!(m.contains(want), "{args:?}: {m}");
        for raw in ["error:", "\x1b[", "1..", "-- ", "For more information"] {
            assert!(!m.contains(raw), "{args:?}: {raw:?} in {m}");
        }
    }
}

#[test]
fn help_and_version_are_shown_and_color_never_is_respected() {
    assert!(matches!(parse(&argv(&["--help"])), Err(Refusal::Show(_))));
    assert!(matches!(parse(&argv(&["-V"])), Err(Refusal::Show(_))));
    // clap prints --help with the colour --color asks for (auto: the terminal and NO_COLOR);
    // errors are plain text.
    let cases: &[(&[&str], clap::ColorChoice)] = &[
        (&["--help", "--color", "never"], clap::ColorChoice::Never),
        (&["--color=always", "-h"], clap::ColorChoice::Always),
        (
            &["--color", "never", "--color", "auto"],
            clap::ColorChoice::Auto,
        ),
        (&["-h"], clap::ColorChoice::Auto),
    ];
    for (words, want) in cases {
        assert_eq!(usage::color_choice(words), *want, "{words:?}");
    }
}

#[test]
fn generate_is_a_command_line_of_its_own() {
    assert!(matches!(
        parse(&argv(&["--generate", "man"])),
        Ok(Parsed::Generate(Generate::Man))
    ));
    for bad in [
        &["--generate", "man", "--pod", "a"][..],
        &["--generate", "pdf"],
    ] {
        assert!(
            matches!(parse(&argv(bad)), Err(Refusal::Usage(_))),
            "{bad:?}"
        );
    }
    let help = command().render_long_help().to_string();
    assert!(!help.contains("generate"));
}
