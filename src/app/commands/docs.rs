//! `nnlint completions SHELL` and `nnlint man`: shell completions and the man page, generated from
//! the clap definition so that they cannot drift from it (docs/nnlint.1 is checked for freshness
//! by a test, as docs/rules.md is).

use clap::CommandFactory;

use super::super::cli::Cli;
use super::super::Outcome;
use crate::error::{Error, Result};

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Outcome {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "nnlint", &mut out);
    Outcome::clean(String::from_utf8_lossy(&out).into_owned())
}

/// The man page: the top-level page, then each command's synopsis, description and options under
/// its own heading (one file, `man nnlint` shows everything).
pub fn man() -> Result<Outcome> {
    let mut cmd = Cli::command();
    cmd.build();
    let render = |f: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| -> Result<String> {
        let mut out = Vec::new();
        f(&mut out).map_err(|e| Error::Usage(format!("rendering the man page: {e}")))?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    };
    let top = clap_mangen::Man::new(cmd.clone());
    // clap_mangen's own subcommand list points at one page per command; this page holds them all
    let mut page = render(&|w| {
        top.render_title(w)?;
        top.render_name_section(w)?;
        top.render_synopsis_section(w)?;
        top.render_description_section(w)?;
        top.render_options_section(w)
    })?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = sub.get_bin_name().unwrap_or(sub.get_name()).to_string();
        let man = clap_mangen::Man::new(sub.clone());
        let body = render(&|w| {
            man.render_synopsis_section(w)?;
            man.render_description_section(w)?;
            man.render_options_section(w)
        })?;
        page.push_str(&format!(".SH \"{}\"\n", name.to_uppercase()));
        for line in body.lines() {
            // the command's sections become subsections of its heading
            match line.strip_prefix(".SH ") {
                Some(rest) => page.push_str(&format!(".SS {rest}\n")),
                None => {
                    page.push_str(line);
                    page.push('\n');
                }
            }
        }
    }
    page.push_str(&render(&|w| top.render_version_section(w))?);
    Ok(Outcome::clean(page))
}
