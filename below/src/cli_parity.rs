//! Our CLI against below 0.9's, listed in tests/reference/below09-cli.tsv
//! (generated from below 0.9's `--help` by tests/reference/below09-cli.sh):
//! every subcommand and flag of below's exists here with the same short
//! flag and default. Ours may add more.

use clap::CommandFactory;

const FIXTURE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/reference/below09-cli.tsv"
));

/// The subcommand at `path` ("below dump cgroup").
fn find<'a>(root: &'a clap::Command, path: &str) -> Option<&'a clap::Command> {
    path.split(' ')
        .skip(1)
        .try_fold(root, |c, name| c.find_subcommand(name))
}

fn check(root: &clap::Command, line: &str) -> Result<(), String> {
    let f: Vec<&str> = line.split('\t').collect();
    match f[..] {
        ["command", path] => find(root, path)
            .map(|_| ())
            .ok_or_else(|| format!("missing subcommand: {}", path)),
        ["option", path, short, long, default] => {
            let cmd = find(root, path).ok_or_else(|| format!("missing subcommand: {}", path))?;
            let arg = cmd
                .get_arguments()
                .find(|a| match long.strip_prefix("--") {
                    Some(l) => a.get_long() == Some(l),
                    None => a.get_short().map(|s| format!("-{}", s)).as_deref() == Some(short),
                })
                .ok_or_else(|| format!("{}: missing {}{}", path, short, long))?;
            let ours_short = arg
                .get_short()
                .map(|s| format!("-{}", s))
                .unwrap_or_default();
            if ours_short != short {
                return Err(format!(
                    "{} {}: short flag {:?}, below has {:?}",
                    path, long, ours_short, short
                ));
            }
            // As --help shows it: flags' implicit "false" is not a default.
            let ours_default: Vec<String> = if arg.get_action().takes_values() {
                arg.get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect()
            } else {
                vec![]
            };
            if ours_default.join(" ") != default {
                return Err(format!(
                    "{} {}{}: default {:?}, below has {:?}",
                    path, short, long, ours_default, default
                ));
            }
            Ok(())
        }
        _ => Err(format!("malformed fixture line: {:?}", line)),
    }
}

#[test]
fn every_below_0_9_command_and_flag_is_here() {
    let mut root = crate::Opt::command();
    root.build();
    let lines: Vec<&str> = FIXTURE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert!(lines.len() > 200, "fixture too short: {}", lines.len());
    let errors: Vec<String> = lines.iter().filter_map(|l| check(&root, l).err()).collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_difference_is_caught() {
    let mut root = crate::Opt::command();
    root.build();
    for bad in [
        "command\tbelow nosuch",
        "option\tbelow record\t\t--nosuch\t",
        "option\tbelow record\t-x\t--interval-s\t5",
        "option\tbelow record\t-i\t--interval-s\t6",
        "option\tbelow replay\t-q\t\t",
    ] {
        assert!(check(&root, bad).is_err(), "{}", bad);
    }
}
