//! `pktrace --generate WHAT` (hidden): the man pages and shell completions, made from the clap
//! definition so they never drift from `--help`. `cargo xtask dist` writes them next to the
//! binary.
//!
//! The man page takes the options from clap (`clap_mangen`) and writes the sections after
//! them itself, from the same texts as `--help` ([`crate::cli::help`]), in no-fill mode so
//! that tables and examples stay as written; its footer is the short version.

use std::io::{self, Write};

use clap_complete::Shell;

use crate::cli::{Generate, USAGE, VERSION, command, help};

/// Writes `what` to `out`.
///
/// # Errors
/// Writing failed.
pub fn generate(what: Generate, out: &mut dyn Write) -> io::Result<()> {
    let mut cmd = command();
    let shell = match what {
        Generate::Man => return man(cmd, out),
        Generate::ManMerge => {
            cmd.build();
            let merge = cmd
                .find_subcommand("merge")
                .cloned()
                .ok_or_else(|| io::Error::other("no merge subcommand"))?;
            return man_page(merge, "pktrace-merge", None, out);
        }
        Generate::Bash => Shell::Bash,
        Generate::Zsh => Shell::Zsh,
        Generate::Fish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "pktrace", out);
    Ok(())
}

/// A page's head and options as `clap_mangen` writes them, with the short version in the
/// footer.
fn man_page(
    cmd: clap::Command,
    title: &str,
    synopsis: Option<&str>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let has_subcommands = cmd.has_subcommands();
    let page = clap_mangen::Man::new(cmd)
        .title(title)
        .source(concat!("pktrace ", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");
    page.render_title(out)?;
    page.render_name_section(out)?;
    match synopsis {
        Some(lines) => section("SYNOPSIS", lines, out)?,
        None => page.render_synopsis_section(out)?,
    }
    page.render_description_section(out)?;
    page.render_options_section(out)?;
    if has_subcommands {
        page.render_subcommands_section(out)?;
    }
    Ok(())
}

/// pktrace.1: clap's head and options, then the sections of the long help as written, and
/// the full version.
fn man(cmd: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    // The synopsis of --help, its lines aligned for a page instead of after "Usage: ".
    let synopsis: Vec<String> = USAGE
        .lines()
        .map(|l| match l.trim_start() {
            rest if rest.starts_with('[') => format!("        {rest}"),
            rest => rest.to_owned(),
        })
        .collect();
    man_page(cmd, "pktrace", Some(&synopsis.join("\n")), out)?;
    for (title, body) in help::SECTIONS {
        section(&title.to_uppercase(), body, out)?;
    }
    let (version, build) = VERSION.split_once(" (").unwrap_or((VERSION, ""));
    let build = build.trim_end_matches(')').replace(", ", "\n");
    section(
        "VERSION",
        &format!(
            "pktrace {version}\n{}",
            build.replace("sha256:", "sha256:\n  ")
        ),
        out,
    )?;
    section("SEE ALSO", help::SEE_ALSO, out)
}

/// A man page section with `body` set line by line as written (no fill, no adjusting).
fn section(title: &str, body: &str, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, ".SH \"{title}\"")?;
    writeln!(out, ".nf")?;
    for line in body.lines() {
        writeln!(out, "{}", roff_line(line))?;
    }
    writeln!(out, ".fi")
}

/// One line of text as roff prints it: backslashes and hyphens escaped, a leading `.` or `'`
/// (a request) guarded.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(what: Generate) -> String {
        let mut out = Vec::new();
        generate(what, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn man_pages_and_completions_cover_the_contract() {
        let man = text(Generate::Man);
        assert!(man.starts_with(".ie \\n(.g .ds Aq"), "roff: {}", &man[..40]);
        for flag in [
            "pod",
            "pod\\-ip",
            "follow",
            "ready\\-file",
            "state\\-file",
            "merge",
        ] {
            assert!(man.contains(flag), "man page lacks {flag}");
        }
        assert!(!man.contains("generate"), "the packaging flag stays hidden");
        let merge = text(Generate::ManMerge);
        assert!(
            merge.contains("pktrace\\-merge") && merge.contains("uplink"),
            "{merge}"
        );
        for (shell, needle) in [
            (Generate::Bash, "complete -F _pktrace"),
            (Generate::Zsh, "#compdef pktrace"),
            (Generate::Fish, "complete -c pktrace"),
        ] {
            let script = text(shell);
            assert!(script.contains(needle), "{shell:?}: {script}");
            assert!(
                script.contains("pod-ip") && script.contains("merge"),
                "{shell:?}"
            );
            assert!(!script.contains("generate"), "{shell:?} offers --generate");
        }
    }

    #[test]
    fn the_man_page_keeps_the_sections_as_written_with_a_short_footer() {
        let man = text(Generate::Man);
        let th = man.lines().find(|l| l.starts_with(".TH ")).unwrap();
        assert!(th.contains(env!("CARGO_PKG_VERSION")), "{th}");
        assert!(th.len() <= 80 && !th.contains("sha256"), "footer: {th}");
        for title in [
            "EXAMPLES",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "WORDS",
            "VERSION",
        ] {
            assert!(man.contains(&format!(".SH \"{title}\"\n.nf\n")), "{title}");
        }
        assert!(!man.contains(".SH EXTRA"), "no reflowed after-help");
        // Each example is a line of its own, as in --help.
        for (line, want) in [
            (
                "pktrace \\-\\-pod ubuntu \\-\\-failures \\-f",
                "--failures -f",
            ),
            ("PKTRACE_CRICTL", "PKTRACE_CRICTL"),
            ("2  usage error", "exit 2"),
            ("journey    one packet", "the glossary"),
        ] {
            assert!(
                man.lines().any(|l| l.starts_with(line)),
                "{want} not on a line of its own"
            );
        }
        // No-fill lines fit a page indented by 7 columns.
        let mut nofill = false;
        for line in man.lines() {
            match line {
                ".nf" => nofill = true,
                ".fi" => nofill = false,
                _ if nofill => {
                    let shown = line.replace("\\-", "-").replace("\\e", "\\");
                    assert!(shown.chars().count() <= help::BODY_WIDTH, "{line}");
                }
                _ => {}
            }
        }
    }
}
