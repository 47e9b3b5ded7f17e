//! `kubectl pktrace`'s command line: pktrace's options and expression given to the plugin as pktrace takes them
//! (`kubectl pktrace ubuntu -f --failures udp port 53`): moved after `--`, where the plugin
//! hands them to pktrace. The plugin's own options stay, and win where both have one (`-n`,
//! `--pod`, `--kubeconfig`, `-h`, `-V`); a word neither knows stays for clap to refuse.

use std::ffi::OsString;

use clap::{Arg, Command};

/// `argv` (program name first) with pktrace's options and the words after the pod moved
/// behind `--`, before what the user wrote there.
pub fn pktrace_words_last(
    argv: Vec<OsString>,
    plugin: &Command,
    pktrace: &Command,
) -> Vec<OsString> {
    let mut words = argv.into_iter();
    let mut own: Vec<OsString> = words.next().into_iter().collect();
    let mut moved: Vec<OsString> = Vec::new();
    let mut after_dashes: Vec<OsString> = Vec::new();
    let pod_flag = plugin_has_pod_flag(&words.clone().collect::<Vec<_>>());
    let mut pod_seen = pod_flag;
    while let Some(word) = words.next() {
        let Some(text) = word.to_str().map(str::to_owned) else {
            own.push(word);
            continue;
        };
        if text == "--" {
            after_dashes.extend(words.by_ref());
            break;
        }
        if let Some(value_follows) = option_of(plugin, &text) {
            own.push(word);
            if value_follows {
                own.extend(words.next());
            }
        } else if let Some(value_follows) = pktrace_only(pktrace, plugin, &text) {
            moved.push(word);
            if value_follows {
                moved.extend(words.next());
            }
        } else if text.starts_with('-') || !pod_seen {
            // The pod, or an option nobody knows (clap says so).
            pod_seen |= !text.starts_with('-');
            own.push(word);
        } else {
            // A word after the pod: pktrace's filter expression.
            moved.push(word);
        }
    }
    if !moved.is_empty() || !after_dashes.is_empty() {
        own.push("--".into());
        own.extend(moved);
        own.extend(after_dashes);
    }
    own
}

/// `--pod` (or `--pod=`) before `--`: then every bare word is pktrace's expression.
fn plugin_has_pod_flag(words: &[OsString]) -> bool {
    words
        .iter()
        .take_while(|w| *w != "--")
        .any(|w| w == "--pod" || w.to_str().is_some_and(|w| w.starts_with("--pod=")))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

/// Whether `word` is an option of `cmd`, and if so whether its value is the next word.
fn option_of(cmd: &Command, word: &str) -> Option<bool> {
    if let Some(long) = word.strip_prefix("--") {
        let (name, inline) = match long.split_once('=') {
            Some((name, _)) => (name, true),
            None => (long, false),
        };
        let arg = cmd.get_arguments().find(|a| a.get_long() == Some(name))?;
        return Some(takes_value(arg) && !inline);
    }
    let mut chars = word.strip_prefix('-')?.chars();
    let first = chars.next()?;
    let arg = cmd.get_arguments().find(|a| a.get_short() == Some(first))?;
    Some(takes_value(arg) && chars.next().is_none())
}

/// Whether `word` is an option of pktrace the plugin does not have (a cluster of pktrace's
/// short flags counts: `-fv`), and if so whether its value is the next word.
fn pktrace_only(pktrace: &Command, plugin: &Command, word: &str) -> Option<bool> {
    if word.starts_with("--") {
        return option_of(pktrace, word);
    }
    let rest = word.strip_prefix('-')?;
    let mut shorts = rest.chars();
    let first = shorts.next()?;
    let short = |c: char| pktrace.get_arguments().find(|a| a.get_short() == Some(c));
    if option_of(plugin, &format!("-{first}")).is_some() {
        return None;
    }
    let arg = short(first)?;
    if takes_value(arg) {
        return Some(rest.chars().count() == 1);
    }
    // A cluster of flags: each one pktrace's, none taking a value.
    shorts
        .all(|c| short(c).is_some_and(|a| !takes_value(a)))
        .then_some(false)
}
