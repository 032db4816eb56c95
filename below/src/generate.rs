//! Hidden commands that generate files from the CLI definition: shell
//! completions (below's `generate-completions`) and man pages (ours, for the
//! package).
//!
//! These files hold nothing private and are meant to be installed for
//! everyone (packaging/build-deb.sh packages them as written), so unlike the
//! store they keep the umask's mode. A symbolic link where one goes is
//! refused, as for every file we write to a path the user names.

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
        Some(p) => Box::new(create(p)?),
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
        create(&path)?
            .write_all(&buf)
            .with_context(|| format!("Failed to write {}", path.display()))?;
    }
    Ok(())
}

/// Creates or truncates `path`, as `File::create`, but not through a link.
fn create(path: &Path) -> Result<std::fs::File> {
    bstats_store::private::open_no_follow(
        path,
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true),
    )
}
