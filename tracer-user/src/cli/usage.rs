//! The front door: the command line parsed with clap ([`parse`]), and clap's errors said in
//! pktrace's words ([`message`]): one line saying what was wrong and what to write instead,
//! without clap's colours, `error:` or tips that do not fit (`-- -i` would make `-i` a filter
//! word). `main` adds the `pktrace: ` prefix ([`crate::diag::error`]).

use std::ffi::OsString;

use clap::{
    ColorChoice, CommandFactory as _, FromArgMatches as _, Parser as _,
    error::{ContextKind, ContextValue, ErrorKind},
};

use super::{Cli, Generate, GenerateCli, command};
use crate::util::safe;

/// A command line clap accepted.
#[derive(Debug)]
pub enum Parsed {
    /// Trace, or `pktrace merge`.
    Run(Box<Cli>),
    /// `--generate WHAT` (packaging).
    Generate(Generate),
}

/// A command line that does not run.
#[derive(Debug)]
pub enum Refusal {
    /// `--help` or `--version`: print it (on stdout) and exit 0.
    Show(clap::Error),
    /// A usage error (exit 2): the message, without the `pktrace: ` prefix.
    Usage(String),
}

/// Whose command line an error is about: the words of the fix differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `pktrace`.
    Pktrace,
    /// `kubectl pktrace` (its own options before `--`, pktrace's after).
    Plugin,
}

/// The tracing options that name what to trace: only one of them at a time.
const TARGETS: [&str; 3] = ["--pod", "--pod-ip", "--svc"];

/// Parses `argv` (the program name first).
///
/// # Errors
/// [`Refusal::Show`] for `--help` and `--version`, [`Refusal::Usage`] for a usage error.
pub fn parse(argv: &[OsString]) -> Result<Parsed, Refusal> {
    let words: Vec<&str> = argv
        .iter()
        .skip(1)
        .map(|w| w.to_str().unwrap_or_default())
        .take_while(|w| *w != "--")
        .collect();
    if words
        .iter()
        .any(|w| *w == "--generate" || w.starts_with("--generate="))
    {
        return GenerateCli::try_parse_from(argv)
            .map(|g| Parsed::Generate(g.generate))
            .map_err(|e| refusal(e, &GenerateCli::command(), Program::Pktrace));
    }
    if let Some(habit) = words.iter().find_map(|w| tcpdump_n(w)) {
        return Err(Refusal::Usage(habit));
    }
    let cmd = command().color(color_choice(&words));
    let matches = cmd
        .clone()
        .try_get_matches_from(argv)
        .map_err(|e| refusal(e, &cmd, Program::Pktrace))?;
    Cli::from_arg_matches(&matches)
        .map(|cli| Parsed::Run(Box::new(cli)))
        .map_err(|e| refusal(e, &cmd, Program::Pktrace))
}

/// clap's colours for `--help`: `--color never` and `always` apply to it too (`auto` follows
/// the terminal and `NO_COLOR`).
pub(super) fn color_choice(words: &[&str]) -> ColorChoice {
    let mut choice = ColorChoice::Auto;
    for (i, w) in words.iter().enumerate() {
        let value = match w.strip_prefix("--color") {
            Some("") => words.get(i + 1).copied(),
            Some(v) => v.strip_prefix('='),
            None => None,
        };
        choice = match value {
            Some("never") => ColorChoice::Never,
            Some("always") => ColorChoice::Always,
            Some("auto") => ColorChoice::Auto,
            _ => continue,
        };
    }
    choice
}

/// tcpdump's `-n`/`-nn` (names not looked up) typed out of habit: with kubectl's `-n`, `-nn`
/// would quietly be namespace `n`.
fn tcpdump_n(word: &str) -> Option<String> {
    let rest = word.strip_prefix("-n")?;
    if rest.is_empty() || !rest.chars().all(|c| matches!(c, 'n' | 'v')) {
        return None;
    }
    let verbose = if rest.contains('v') {
        " (-v alone still asks for more diagnostics)"
    } else {
        ""
    };
    Some(format!(
        "'{word}' would be namespace '{rest}': here -n is the namespace, as in kubectl (-n \
         kube-system), not tcpdump's -n; pktrace never looks names up, so leave {word} \
         out{verbose}"
    ))
}

fn refusal(err: clap::Error, cmd: &clap::Command, program: Program) -> Refusal {
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Refusal::Show(err),
        _ => Refusal::Usage(message(&err, cmd, program)),
    }
}

/// The text of a context value.
fn context(err: &clap::Error, kind: ContextKind) -> Option<String> {
    match err.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) => Some(v.join(", ")),
        _ => None,
    }
}

/// `--count <N>` as clap names it → `-c/--count`, as the user may have typed either.
fn option_name(cmd: &clap::Command, raw: &str) -> String {
    let flag = raw.split([' ', '=']).next().unwrap_or(raw);
    let long = flag.strip_prefix("--");
    let short = flag
        .strip_prefix('-')
        .filter(|s| s.chars().count() == 1)
        .and_then(|s| s.chars().next());
    let arg = cmd.get_arguments().find(|a| {
        (long.is_some() && a.get_long() == long) || (short.is_some() && a.get_short() == short)
    });
    match arg.map(|a| (a.get_short(), a.get_long())) {
        Some((Some(s), Some(l))) => format!("-{s}/--{l}"),
        _ => flag.to_owned(),
    }
}

/// The hint that ends a message without a fix of its own.
const fn help_hint(program: Program) -> &'static str {
    match program {
        Program::Pktrace => "pktrace -h lists the options",
        Program::Plugin => "kubectl pktrace -h lists the options",
    }
}

/// A usage error of clap in pktrace's words: what was wrong and what to write.
#[must_use]
pub fn message(err: &clap::Error, cmd: &clap::Command, program: Program) -> String {
    let raw_arg = context(err, ContextKind::InvalidArg).unwrap_or_default();
    let arg = option_name(cmd, &raw_arg);
    let hint = help_hint(program);
    match err.kind() {
        ErrorKind::UnknownArgument => unknown(&raw_arg, err, program),
        ErrorKind::InvalidValue => {
            let value = context(err, ContextKind::InvalidValue).unwrap_or_default();
            if value.is_empty() {
                return missing_value(cmd, &raw_arg, &arg);
            }
            let valid = context(err, ContextKind::ValidValue).unwrap_or_default();
            format!(
                "'{}' is not a value of {arg}: give one of {valid}",
                safe(&value)
            )
        }
        ErrorKind::ValueValidation => match std::error::Error::source(err) {
            Some(why) => format!("{arg}: {why}"),
            None => fallback(err, hint),
        },
        ErrorKind::ArgumentConflict => {
            let prior = context(err, ContextKind::PriorArg).unwrap_or_default();
            let prior = option_name(cmd, &prior);
            if prior == arg {
                return format!("{arg} is given twice: give it once");
            }
            let bare = |a: &str| a.rsplit('/').next().unwrap_or_default().to_owned();
            if TARGETS.contains(&bare(&arg).as_str()) && TARGETS.contains(&bare(&prior).as_str()) {
                format!(
                    "{prior} and {arg} cannot go together: trace a pod (--pod), addresses \
                     (--pod-ip) or a service (--svc), one at a time"
                )
            } else {
                format!("{arg} cannot be used with {prior}: give one of them")
            }
        }
        ErrorKind::MissingRequiredArgument => {
            if raw_arg.starts_with("--write") {
                "-s/--snaplen says how much of each frame -w keeps: add -w FILE.pcapng, or \
                 leave -s out"
                    .to_owned()
            } else if raw_arg.contains("FILE") {
                "pktrace merge needs the files to merge: pktrace merge [NODE=]FILE... (each \
                 node's pktrace -o json)"
                    .to_owned()
            } else {
                format!("{} is missing; {hint}", safe(&raw_arg))
            }
        }
        _ => fallback(err, hint),
    }
}

/// `-n` with nothing after it: kubectl's `-n` needs a namespace (tcpdump's takes none).
fn missing_value(cmd: &clap::Command, raw_arg: &str, arg: &str) -> String {
    let name = raw_arg.split(' ').nth(1).unwrap_or("VALUE");
    let name = name.trim_end_matches("...").trim_matches(['<', '>']);
    let flag = arg.split('/').next().unwrap_or(arg);
    let mut text = format!("{arg} needs a value: {flag} {name}");
    if cmd.get_name() != "kubectl-pktrace" && arg == "-n/--namespace" {
        text.push_str(
            " (as in kubectl, -n kube-system); tcpdump's -n is not needed: pktrace never \
             looks names up",
        );
    }
    text
}

/// tcpdump options pktrace has no use for, and what to do instead.
const TCPDUMP: [(&str, &str); 6] = [
    (
        "-X",
        "pktrace does not print packet contents: write them with -w FILE and read them \
         with tshark -x -r FILE",
    ),
    (
        "-A",
        "pktrace does not print packet contents: write them with -w FILE",
    ),
    ("-e", "link-level headers are in the frames -w FILE writes"),
    (
        "-t",
        "-o line starts each journey with its wall-clock time, -o json has every time",
    ),
    (
        "-r",
        "pktrace traces live packets; open a -w file with tshark or Wireshark",
    ),
    (
        "-D",
        "pktrace picks the node's interfaces itself; -i LIST names others",
    ),
];

/// An option this command line does not have.
fn unknown(raw: &str, err: &clap::Error, program: Program) -> String {
    let shown = safe(raw);
    if program == Program::Plugin {
        return format!(
            "neither kubectl pktrace nor pktrace has an option '{shown}': kubectl pktrace -h \
             lists the plugin's, pktrace -h pktrace's (given after the pod or after --)"
        );
    }
    let family = raw.get(..2).unwrap_or(raw);
    if let Some((_, fix)) = TCPDUMP.iter().find(|(flag, _)| *flag == family) {
        return format!("pktrace has no option '{shown}' (as tcpdump's): {fix}");
    }
    match context(err, ContextKind::SuggestedArg) {
        Some(s) => format!("unknown option '{shown}': did you mean '{}'?", safe(&s)),
        None => format!("unknown option '{shown}': {}", help_hint(program)),
    }
}

/// clap's own message, plain, on one line, without `error: ` and its tips.
fn fallback(err: &clap::Error, hint: &str) -> String {
    let rendered = err.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    format!("{first}; {hint}")
}
