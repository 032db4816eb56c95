//! The config file: below's keys (below-config's `BelowConfig`) and ours
//! (`ExtraConfig`) in one TOML file. A key neither knows is an error that
//! names the closest known key (a typo would otherwise leave the default
//! on silently); a file that cannot be read is an error, unless it is the
//! default path and absent.

use std::path::Path;
use std::path::PathBuf;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use below_config::BelowConfig;
use bstats_collector::BackendChoice;
use serde::de;
use serde::Deserialize;

/// Our keys in below's config file.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ExtraConfig {
    pub(crate) cgroup_backend: Option<BackendChoice>,
    pub(crate) process_backend: Option<bstats_procs::ProcessBackend>,
    pub(crate) cgroup_root: Option<PathBuf>,
    pub(crate) listen: Option<std::net::SocketAddr>,
    pub(crate) web_config_file: Option<PathBuf>,
    #[serde(default)]
    pub(crate) metrics: bstats_metrics::Options,
    pub(crate) cgroup_top: Option<usize>,
    pub(crate) cgroup_top_by: Option<bstats_collector::TopBy>,
    pub(crate) cgroup_top_keep: Option<String>,
    pub(crate) store_sync: Option<bstats_store::StoreSync>,
}

/// Reads the config file at `path`.
pub(crate) fn load(path: &Path) -> Result<(BelowConfig, ExtraConfig)> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && path == Path::new(below_config::BELOW_DEFAULT_CONF) =>
        {
            return Ok(Default::default());
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("Failed to read config file {}", path.display()));
        }
    };
    parse(&text).with_context(|| format!("Invalid config file {}", path.display()))
}

fn parse(text: &str) -> Result<(BelowConfig, ExtraConfig)> {
    let table: toml::Table = toml::from_str(text)?;
    let known: Vec<&str> = [fields::<BelowConfig>(), fields::<ExtraConfig>()].concat();
    for key in table.keys() {
        if !known.contains(&key.as_str()) {
            match closest(key, &known) {
                Some(k) => bail!("unknown key `{key}` (did you mean `{k}`?)"),
                None => bail!("unknown key `{key}`; known keys: {}", known.join(", ")),
            }
        }
    }
    // Each takes its own keys; the other's are known, so not unknown.
    Ok((table.clone().try_into()?, table.try_into()?))
}

/// The field names of struct `T` as its `Deserialize` declares them.
fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> de::Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("only its fields were asked for"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut out: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut out));
    out
}

/// The known key nearest to `key` in edits, if near enough to be a typo.
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|&(d, k)| d <= (k.len() / 3).max(2))
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn both_key_sets_are_known() {
        let (below, extra) = parse(
            "store_dir = \"/s\"\nlisten = \"127.0.0.1:9749\"\ncgroup_top = 5\nstore_sync = \"interval:60\"\n[metrics]\nmax_series = 10\n",
        )
        .unwrap();
        assert_eq!(
            extra.store_sync,
            Some(bstats_store::StoreSync::Interval(
                std::time::Duration::from_secs(60)
            ))
        );
        assert!(parse("store_sync = \"always\"").is_err());
        assert_eq!(below.store_dir, Path::new("/s"));
        assert_eq!(extra.cgroup_top, Some(5));
        assert_eq!(extra.metrics.max_series, 10);
        assert!(fields::<BelowConfig>().contains(&"enable_tc_stats"));
        assert!(fields::<ExtraConfig>().contains(&"cgroup_top_keep"));
    }

    /// A value takes the same name as a flag (clap's, derived from the
    /// variant) and in the config file (serde's, derived on its own).
    #[test]
    fn flags_and_keys_take_the_same_names() {
        fn same<T>(key: &str, get: fn(ExtraConfig) -> Option<T>)
        where
            T: clap::ValueEnum + PartialEq + std::fmt::Debug,
        {
            for v in T::value_variants() {
                let name = v.to_possible_value().expect("no value is skipped");
                let (_, extra) = parse(&format!("{key} = \"{}\"", name.get_name())).unwrap();
                assert_eq!(get(extra).as_ref(), Some(v), "{key}");
            }
        }
        same("cgroup_backend", |e| e.cgroup_backend);
        same("process_backend", |e| e.process_backend);
        same("cgroup_top_by", |e| e.cgroup_top_by);
    }

    #[test]
    fn a_typo_names_the_key_meant() {
        let e = |text| format!("{:#}", parse(text).unwrap_err());
        assert_eq!(
            e("lisen = \"127.0.0.1:9749\""),
            "unknown key `lisen` (did you mean `listen`?)"
        );
        assert_eq!(
            e("store_dirr = \"/s\""),
            "unknown key `store_dirr` (did you mean `store_dir`?)"
        );
        let far = e("colour = 1");
        assert!(
            far.starts_with("unknown key `colour`; known keys: log_dir, "),
            "{far}"
        );
        // Inside [metrics], the metrics options say it.
        assert!(e("[metrics]\nmax_seriez = 1").contains("max_seriez"));
    }

    #[test]
    fn an_unreadable_file_is_an_error_unless_the_default_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("below.conf");
        let e = format!("{:#}", load(&missing).unwrap_err());
        assert!(e.starts_with("Failed to read config file"), "{e}");
        let e = format!("{:#}", load(dir.path()).unwrap_err());
        assert!(e.starts_with("Failed to read config file"), "{e}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
