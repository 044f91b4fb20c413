//! Allocator profiles: which `malloc` a node runs with, turned into its
//! environment (`LD_PRELOAD`, `MALLOC_CONF`, `GLIBC_TUNABLES`, ...). Finding
//! the library on a machine and proving it loaded is the driver's
//! (`driver::allocator`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::values::did_you_mean;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Glibc,
    Jemalloc,
    Mimalloc,
    Tcmalloc,
    Custom,
}

pub const KINDS: [&str; 5] = ["glibc", "jemalloc", "mimalloc", "tcmalloc", "custom"];

/// glibc's malloc tunables (`GLIBC_TUNABLES=glibc.malloc.NAME=...`), and
/// `arena_max`, which also has its classic variable `MALLOC_ARENA_MAX`.
pub const GLIBC_OPTIONS: [&str; 10] = [
    "arena_max",
    "arena_test",
    "trim_threshold",
    "mmap_threshold",
    "mmap_max",
    "top_pad",
    "tcache_count",
    "tcache_max",
    "mxfast",
    "hugetlb",
];

impl Kind {
    fn parse(s: &str) -> Result<Kind, String> {
        Ok(match s {
            "glibc" => Kind::Glibc,
            "jemalloc" => Kind::Jemalloc,
            "mimalloc" => Kind::Mimalloc,
            "tcmalloc" => Kind::Tcmalloc,
            "custom" => Kind::Custom,
            other => {
                return Err(format!(
                    "unknown allocator `{other}`{}; allocators: {} (custom takes a `preload` path)",
                    did_you_mean(other, KINDS),
                    KINDS.join(", ")
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        KINDS[self as usize]
    }

    /// Library file names, most specific first, and the Debian package.
    pub fn library(self) -> (&'static [&'static str], &'static str) {
        match self {
            Kind::Jemalloc => (&["libjemalloc.so.2", "libjemalloc.so"], "libjemalloc2"),
            Kind::Mimalloc => (
                &["libmimalloc.so.2", "libmimalloc.so.2.0", "libmimalloc.so"],
                "libmimalloc2.0",
            ),
            Kind::Tcmalloc => (
                &[
                    "libtcmalloc_minimal.so.4",
                    "libtcmalloc.so.4",
                    "libtcmalloc_minimal.so",
                ],
                "libtcmalloc-minimal4",
            ),
            Kind::Glibc | Kind::Custom => (&[], ""),
        }
    }
}

/// An allocator and its settings, as a suite names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// How cells and reports call it: `jemalloc`, `glibc(arena_max=2)`.
    pub name: String,
    pub kind: Kind,
    pub options: BTreeMap<String, String>,
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Profile {
    pub fn named(kind: Kind) -> Profile {
        Profile {
            name: kind.as_str().into(),
            kind,
            options: BTreeMap::new(),
        }
    }

    fn with_options(kind: Kind, options: BTreeMap<String, String>) -> Result<Profile, String> {
        let mut options = options;
        let explicit_name = options.remove("name");
        match kind {
            Kind::Glibc => {
                for k in options.keys() {
                    if !GLIBC_OPTIONS.contains(&k.as_str()) {
                        return Err(format!(
                            "unknown glibc malloc option `{k}`{}; options: {}",
                            did_you_mean(k, GLIBC_OPTIONS),
                            GLIBC_OPTIONS.join(", ")
                        ));
                    }
                }
                for (k, v) in &options {
                    parse_number_or_size(v).map_err(|e| format!("glibc option `{k}`: {e}"))?;
                }
            }
            Kind::Custom if !options.contains_key("preload") => {
                return Err("a custom allocator needs `preload: /path/to/libmalloc.so` (other keys become environment variables)".into());
            }
            _ => {}
        }
        let name = explicit_name.unwrap_or_else(|| {
            if options.is_empty() {
                kind.as_str().to_string()
            } else {
                let o: Vec<String> = options.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{}({})", kind.as_str(), o.join(";"))
            }
        });
        Ok(Profile {
            name,
            kind,
            options,
        })
    }

    /// The environment that selects and tunes this allocator, given where
    /// its library is (`None` for glibc).
    pub fn environment(&self, library: Option<&Path>) -> Vec<(String, String)> {
        let mut env = vec![];
        if let Some(lib) = library {
            env.push(("LD_PRELOAD".into(), lib.display().to_string()));
        }
        match self.kind {
            Kind::Glibc => {
                let mut tunables = vec![];
                for (k, v) in &self.options {
                    let n = parse_number_or_size(v).unwrap_or(0);
                    if k == "arena_max" {
                        env.push(("MALLOC_ARENA_MAX".into(), n.to_string()));
                    }
                    tunables.push(format!("glibc.malloc.{k}={n}"));
                }
                if !tunables.is_empty() {
                    env.push(("GLIBC_TUNABLES".into(), tunables.join(":")));
                }
            }
            Kind::Jemalloc if !self.options.is_empty() => {
                let conf: Vec<String> = self
                    .options
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                env.push(("MALLOC_CONF".into(), conf.join(",")));
            }
            Kind::Mimalloc => {
                for (k, v) in &self.options {
                    env.push((format!("MIMALLOC_{}", k.to_ascii_uppercase()), v.clone()));
                }
            }
            Kind::Tcmalloc => {
                for (k, v) in &self.options {
                    env.push((format!("TCMALLOC_{}", k.to_ascii_uppercase()), v.clone()));
                }
            }
            Kind::Custom => {
                for (k, v) in self.options.iter().filter(|(k, _)| *k != "preload") {
                    env.push((k.clone(), v.clone()));
                }
            }
            _ => {}
        }
        env
    }
}

/// A number, or a size such as `128KiB`, as bytes.
fn parse_number_or_size(v: &str) -> Result<u64, String> {
    crate::units::parse_size(v).map_err(|e| e.to_string())
}

/// `jemalloc`, or `{ glibc: { arena_max: 2 } }`, or
/// `{ custom: { preload: /opt/lib/libfoo.so, FOO_OPT: 1 } }`.
impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Profile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an allocator: glibc, jemalloc, mimalloc, tcmalloc, or a one-key map such as { glibc: { arena_max: 2 } }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Profile, E> {
                let kind = Kind::parse(v).map_err(E::custom)?;
                if kind == Kind::Custom {
                    return Err(E::custom("a custom allocator needs its library: write `{ custom: { preload: /path/to/lib.so } }`"));
                }
                Ok(Profile::named(kind))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Profile, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom("an empty map is not an allocator"));
                };
                let kind = Kind::parse(&key).map_err(de::Error::custom)?;
                let raw: BTreeMap<String, serde_norway::Value> = map.next_value()?;
                let mut options = BTreeMap::new();
                for (k, v) in raw {
                    options.insert(
                        k.clone(),
                        super::values::scalar(&v).ok_or_else(|| {
                            de::Error::custom(format!(
                                "`{k}`: allocator options are scalars (numbers, sizes, words)"
                            ))
                        })?,
                    );
                }
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(if extra == "name" {
                        format!("`name` goes inside the allocator's options: `{{ {key}: {{ ..., name: NAME }} }}`")
                    } else {
                        format!("one allocator per entry: `{extra}` must be its own list item")
                    }));
                }
                Profile::with_options(kind, options).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<Profile, String> {
        serde_norway::from_str(y).map_err(|e| e.to_string())
    }

    #[test]
    fn profiles_become_environments() {
        let p = parse("{ glibc: { arena_max: 2, trim_threshold: 128KiB } }").unwrap();
        assert_eq!(p.name, "glibc(arena_max=2;trim_threshold=128KiB)");
        let env = p.environment(None);
        assert!(env.contains(&("MALLOC_ARENA_MAX".into(), "2".into())));
        assert!(env.contains(&(
            "GLIBC_TUNABLES".into(),
            "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072".into()
        )));
        let j = parse("{ jemalloc: { narenas: 2, background_thread: true, name: je2 } }").unwrap();
        assert_eq!(j.name, "je2");
        let env = j.environment(Some(Path::new("/x/libjemalloc.so.2")));
        assert_eq!(env[0], ("LD_PRELOAD".into(), "/x/libjemalloc.so.2".into()));
        assert_eq!(
            env[1],
            (
                "MALLOC_CONF".into(),
                "background_thread:true,narenas:2".into()
            )
        );
    }

    #[test]
    fn bad_profiles_say_why() {
        assert!(parse("jemaloc")
            .unwrap_err()
            .contains("did you mean `jemalloc`"));
        assert!(parse("{ glibc: { arena_mx: 2 } }")
            .unwrap_err()
            .contains("did you mean `arena_max`"));
        assert!(parse("custom").unwrap_err().contains("preload"));
    }

    #[test]
    fn a_missing_library_names_its_package() {
        let empty = tempfile::tempdir().unwrap();
        let dirs = [empty.path().to_str().unwrap()];
        for (profile, package) in [
            ("jemalloc", "libjemalloc2"),
            ("mimalloc", "libmimalloc2.0"),
            ("tcmalloc", "libtcmalloc-minimal4"),
        ] {
            let err = parse(profile)
                .unwrap()
                .find_library_in(&dirs, "")
                .unwrap_err();
            assert!(
                err.contains(&format!("install it with `apt-get install {package}`")),
                "{err}"
            );
        }
        // ldconfig's cache is the second place looked in.
        let so = empty.path().join("libjemalloc.so.2");
        let cache = format!("\tlibjemalloc.so.2 (libc6,x86-64) => {}\n", so.display());
        let found = parse("jemalloc").unwrap().find_library_in(&[], &cache);
        assert_eq!(found, Ok(Some(so)));
        assert_eq!(parse("glibc").unwrap().find_library_in(&dirs, ""), Ok(None));
    }
}
