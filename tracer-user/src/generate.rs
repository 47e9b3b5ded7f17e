//! `pktrace --generate WHAT` (hidden): the man pages and shell completions, made from the clap
//! definition so they never drift from `--help`. `cargo xtask dist` writes them next to the
//! binary.

use std::io::{self, Write};

use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::{Cli, Generate};

/// Writes `what` to `out`.
///
/// # Errors
/// Writing failed.
pub fn generate(what: Generate, out: &mut dyn Write) -> io::Result<()> {
    let mut cmd = Cli::command();
    let shell = match what {
        Generate::Man => return clap_mangen::Man::new(cmd).render(out),
        Generate::ManMerge => {
            cmd.build();
            let merge = cmd
                .find_subcommand("merge")
                .cloned()
                .ok_or_else(|| io::Error::other("no merge subcommand"))?;
            return clap_mangen::Man::new(merge).render(out);
        }
        Generate::Bash => Shell::Bash,
        Generate::Zsh => Shell::Zsh,
        Generate::Fish => Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "pktrace", out);
    Ok(())
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
        }
    }
}
