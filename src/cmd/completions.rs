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
  spate man --dir /usr/local/share/man/man1 && mandb
  spate man --markdown > docs/reference.md")]
pub struct ManArgs {
    /// Write spate.1 and one page per command (spate-smtp.1, …) into DIR instead of
    /// printing spate(1).
    #[arg(long, value_name = "DIR", conflicts_with = "markdown")]
    pub dir: Option<PathBuf>,
    /// Print every command and option as one Markdown page (the book's reference
    /// chapter) instead of spate(1).
    #[arg(long)]
    pub markdown: bool,
}

/// `spate man`: spate(1) on stdout, or every page into a directory.
pub fn man(args: ManArgs, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let mut cmd = (ctx.commands)();
    cmd.build();
    if args.markdown {
        std::io::stdout().write_all(markdown(&cmd).as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
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

/// Every command and its options as Markdown, from the clap definitions: what `--help`
/// shows, one section per command.
pub fn markdown(cli: &clap::Command) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "# Reference: every command and option\n\n\
         Generated from spate's own definitions (`spate man --markdown`), the same ones \
         `--help`, the manual pages and the completions come from; a test keeps this page \
         in step with them.\n",
    );
    let mut commands: Vec<&clap::Command> = vec![cli];
    let mut subs: Vec<&clap::Command> = cli
        .get_subcommands()
        .filter(|c| c.get_name() != "help")
        .collect();
    // In the order --help lists them.
    subs.sort_by_key(|c| c.get_display_order());
    commands.extend(subs);
    for c in commands {
        let name = if c.get_name() == cli.get_name() {
            cli.get_name().to_string()
        } else {
            format!("{} {}", cli.get_name(), c.get_name())
        };
        let _ = write!(out, "\n## {name}\n\n");
        if let Some(about) = c.get_long_about().or(c.get_about()) {
            let _ = write!(out, "{}\n\n", about.to_string().trim());
        }
        let usage = c.clone().bin_name(&name).render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ").trim();
        let _ = write!(out, "```text\n{usage}\n```\n");
        let args: Vec<&clap::Arg> = c
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
            .collect();
        // Grouped under their --help headings, in the order they first appear.
        let mut headings: Vec<Option<&str>> = Vec::new();
        for a in &args {
            if !headings.contains(&a.get_help_heading()) {
                headings.push(a.get_help_heading());
            }
        }
        for h in headings {
            match h {
                Some(h) => {
                    let _ = write!(out, "\n**{h}**\n\n");
                }
                None => out.push('\n'),
            }
            for a in args.iter().filter(|a| a.get_help_heading() == h) {
                let _ = writeln!(out, "- {}", arg_line(a));
            }
        }
        if let Some(after) = c.get_after_help() {
            let _ = write!(out, "\n```text\n{}\n```\n", after.to_string().trim());
        }
    }
    out
}

/// Help text as Markdown prose: a `<placeholder>` would be taken for an HTML tag (and
/// vanish from the page: `spate_<name>_total` read `spate__total`), and `*` for emphasis.
/// Code spans (between backticks) are left as they are: Markdown shows them literally.
fn prose(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            0 => part
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('*', "\\*"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// One option: its spellings and value, what it does, its default, choices and variable.
fn arg_line(a: &clap::Arg) -> String {
    let mut names = Vec::new();
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    let takes = a.get_num_args().is_some_and(|n| n.takes_values())
        && !matches!(
            a.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
        );
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    let mut line = if names.is_empty() {
        format!("`{value}`")
    } else if takes {
        format!("`{} {value}`", names.join(", "))
    } else {
        format!("`{}`", names.join(", "))
    };
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let help = prose(&help.split_whitespace().collect::<Vec<_>>().join(" "));
    if !help.is_empty() {
        line.push_str(": ");
        line.push_str(&help);
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && takes {
        line.push_str(&format!(" (default: `{}`)", defaults.join(",")));
    }
    let choices: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| format!("`{}`", p.get_name()))
        .collect();
    if !choices.is_empty() && takes {
        line.push_str(&format!(" (one of {})", choices.join(", ")));
    }
    if let Some(env) = a.get_env() {
        line.push_str(&format!(" (environment: `{}`)", env.to_string_lossy()));
    }
    line
}
