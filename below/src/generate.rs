//! Hidden commands that generate files from the CLI definition: shell
//! completions (below's `generate-completions`) and man pages (ours, for the
//! package).

use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use anyhow::Context;
use anyhow::Result;

/// Writes completions for `shell` to `output`, or stdout.
pub fn completions(
    cmd: &mut clap::Command,
    shell: clap_complete::Shell,
    output: Option<PathBuf>,
) -> Result<()> {
    let mut out: Box<dyn Write> = match &output {
        Some(p) => Box::new(
            std::fs::File::create(p)
                .with_context(|| format!("Failed to create {}", p.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    clap_complete::generate(shell, cmd, "below", &mut out);
    out.flush().context("Failed to write completions")
}

/// Writes `below.1` and `below-<subcommand>.1` for each visible subcommand
/// into `dir`.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("Failed to create {}", dir.display()))?;
    let cmd = cmd.name("below");
    let mut pages = vec![("below".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("below-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{}.1", name));
        let mut buf = vec![];
        clap_mangen::Man::new(page)
            .render(&mut buf)
            .context("Failed to render man page")?;
        std::fs::write(&path, buf)
            .with_context(|| format!("Failed to write {}", path.display()))?;
    }
    Ok(())
}
