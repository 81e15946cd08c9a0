//! `spate completions SHELL` and `spate man`: shell completions and manual pages, both
//! generated from the clap definitions, so they never drift from `--help`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::ctx::Ctx;

/// Options of `spate completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "EXAMPLES:
  spate completions bash > /etc/bash_completion.d/spate
  spate completions zsh > \"${fpath[1]}/_spate\"
  spate completions fish > ~/.config/fish/completions/spate.fish")]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `spate completions`: the script on stdout.
pub fn completions(args: CompletionsArgs, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let mut cmd = (ctx.commands)();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "spate", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Options of `spate man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "EXAMPLES:
  spate man | man -l -
  spate man --dir /usr/local/share/man/man1 && mandb")]
pub struct ManArgs {
    /// Write spate.1 and one page per command (spate-smtp.1, …) into DIR instead of
    /// printing spate(1).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `spate man`: spate(1) on stdout, or every page into a directory.
pub fn man(args: ManArgs, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let mut cmd = (ctx.commands)();
    cmd.build();
    let Some(dir) = args.dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        std::io::stdout().write_all(&out)?;
        return Ok(ExitCode::SUCCESS);
    };
    if !dir.is_dir() {
        return crate::usage(format!("--dir {}: no such directory", dir.display()));
    }
    let mut written = Vec::new();
    let pages = std::iter::once(("spate".to_string(), cmd.clone())).chain(
        cmd.get_subcommands()
            .filter(|c| c.get_name() != "help")
            .map(|c| {
                let name = format!("spate-{}", c.get_name());
                (name.clone(), c.clone().display_name(name))
            }),
    );
    for (name, page) in pages {
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.to_uppercase())
            .render(&mut out)?;
        let file = format!("{name}.1");
        let path = dir.join(&file);
        std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(file);
    }
    println!(
        "wrote {} pages into {}: {}",
        written.len(),
        dir.display(),
        written.join(" ")
    );
    Ok(ExitCode::SUCCESS)
}
