//! Matrices: the cartesian product of named axes, with `include` and
//! `exclude`, each cell named by its parameters (`allocator=jemalloc,storage=small`).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::suite::allocator::Profile;

/// RocksDB's compression names, checked wherever a parameter is called
/// `compression` or ends in `_compression`.
pub const CODECS: [&str; 8] = [
    "none", "snappy", "zlib", "bzip2", "lz4", "lz4hc", "xpress", "zstd",
];

/// One value of an axis: its name, the fields that `${axis.field}` reads,
/// and, on the `allocator` axis, the allocator profile.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisValue {
    pub name: String,
    pub fields: BTreeMap<String, String>,
    pub allocator: Option<Profile>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Matrix {
    /// Axes in the order written.
    pub axes: Vec<(String, Vec<AxisValue>)>,
    pub include: Vec<Vec<(String, AxisValue)>>,
    pub exclude: Vec<BTreeMap<String, String>>,
}

/// One cell: an id and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct CellDef {
    pub id: String,
    pub params: Vec<(String, AxisValue)>,
}

impl CellDef {
    /// Template variables: `${axis}`, `${axis.name}`, `${axis.field}`.
    pub fn variables(&self) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        for (axis, v) in &self.params {
            vars.insert(axis.clone(), v.name.clone());
            vars.insert(format!("{axis}.name"), v.name.clone());
            for (f, x) in &v.fields {
                vars.insert(format!("{axis}.{f}"), x.clone());
            }
        }
        vars
    }

    pub fn params_map(&self) -> BTreeMap<String, String> {
        self.params
            .iter()
            .map(|(a, v)| (a.clone(), v.name.clone()))
            .collect()
    }

    pub fn allocator(&self) -> Option<&Profile> {
        self.params.iter().find_map(|(_, v)| v.allocator.as_ref())
    }
}

/// A YAML scalar (word, number, boolean) as text; `None` for a list or map.
pub fn scalar(v: &serde_norway::Value) -> Option<String> {
    match v {
        serde_norway::Value::String(s) => Some(s.clone()),
        serde_norway::Value::Number(n) => Some(n.to_string()),
        serde_norway::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn check_codec(field: &str, value: &str) -> Result<(), String> {
    if (field == "compression" || field.ends_with("_compression")) && !CODECS.contains(&value) {
        return Err(format!(
            "unknown compression `{value}` in `{field}`{}; RocksDB's are {}",
            super::values::did_you_mean(value, CODECS),
            CODECS.join(", ")
        ));
    }
    Ok(())
}

fn axis_value(axis: &str, v: serde_norway::Value) -> Result<AxisValue, String> {
    if axis == "allocator" {
        let p: Profile = serde_norway::from_value(v).map_err(|e| e.to_string())?;
        return Ok(AxisValue {
            name: p.name.clone(),
            fields: BTreeMap::new(),
            allocator: Some(p),
        });
    }
    if let Some(s) = scalar(&v) {
        check_codec(axis, &s)?;
        return Ok(AxisValue {
            name: s,
            fields: BTreeMap::new(),
            allocator: None,
        });
    }
    let serde_norway::Value::Mapping(m) = v else {
        return Err(format!("a value of `{axis}` is a word, a number, or a map of fields such as {{ name: small, block_cache: 32MiB }}"));
    };
    let mut fields = BTreeMap::new();
    for (k, x) in m {
        let k = scalar(&k).ok_or("field names are words")?;
        let x = scalar(&x).ok_or_else(|| {
            format!("field `{k}` must be a word or a number, not a list or a map")
        })?;
        check_codec(&k, &x)?;
        fields.insert(k, x);
    }
    let name = fields.get("name").cloned().unwrap_or_else(|| {
        fields
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(";")
    });
    Ok(AxisValue {
        name,
        fields,
        allocator: None,
    })
}

impl<'de> Deserialize<'de> for Matrix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Matrix;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a map of axes, each a list of values, e.g. { allocator: [glibc, jemalloc] }",
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Matrix, A::Error> {
                let mut m = Matrix::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "include" => {
                            let entries: Vec<serde_norway::Mapping> = map.next_value()?;
                            for e in entries {
                                let mut cell = vec![];
                                for (k, v) in e {
                                    let k = scalar(&k)
                                        .ok_or_else(|| de::Error::custom("axis names are words"))?;
                                    cell.push((
                                        k.clone(),
                                        axis_value(&k, v).map_err(de::Error::custom)?,
                                    ));
                                }
                                m.include.push(cell);
                            }
                        }
                        "exclude" => {
                            let entries: Vec<serde_norway::Mapping> = map.next_value()?;
                            for e in entries {
                                let mut sel = BTreeMap::new();
                                for (k, v) in e {
                                    let k = scalar(&k)
                                        .ok_or_else(|| de::Error::custom("axis names are words"))?;
                                    let name = match scalar(&v) {
                                        Some(s) => s,
                                        None => axis_value(&k, v).map_err(de::Error::custom)?.name,
                                    };
                                    sel.insert(k, name);
                                }
                                m.exclude.push(sel);
                            }
                        }
                        axis => {
                            if axis.is_empty()
                                || !axis.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                            {
                                return Err(de::Error::custom(format!("axis `{axis}`: axis names are letters, digits and `_` (they become ${{{axis}}} templates)")));
                            }
                            let values: Vec<serde_norway::Value> = map.next_value()?;
                            if values.is_empty() {
                                return Err(de::Error::custom(format!(
                                    "axis `{axis}` has no values"
                                )));
                            }
                            let mut parsed = vec![];
                            for (i, v) in values.into_iter().enumerate() {
                                let av = axis_value(axis, v)
                                    .map_err(|e| de::Error::custom(format!("{axis}[{i}]: {e}")))?;
                                if parsed.iter().any(|p: &AxisValue| p.name == av.name) {
                                    return Err(de::Error::custom(format!("axis `{axis}` has two values named `{}`: give them distinct `name`s", av.name)));
                                }
                                parsed.push(av);
                            }
                            m.axes.push((axis.to_string(), parsed));
                        }
                    }
                }
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

fn cell_id(params: &[(String, AxisValue)]) -> String {
    if params.is_empty() {
        return "default".into();
    }
    params
        .iter()
        .map(|(a, v)| format!("{a}={}", v.name))
        .collect::<Vec<_>>()
        .join(",")
}

impl Matrix {
    /// Every cell: the product of the axes, less `exclude`, plus `include`.
    pub fn cells(&self) -> Vec<CellDef> {
        let mut combos: Vec<Vec<(String, AxisValue)>> = vec![vec![]];
        for (axis, values) in &self.axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((axis.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        let excluded = |c: &[(String, AxisValue)]| {
            self.exclude.iter().any(|sel| {
                sel.iter()
                    .all(|(a, n)| c.iter().any(|(ca, cv)| ca == a && &cv.name == n))
            })
        };
        let mut cells: Vec<CellDef> = combos
            .into_iter()
            .filter(|c| !self.axes.is_empty() && !excluded(c))
            .map(|params| CellDef {
                id: cell_id(&params),
                params,
            })
            .collect();
        for inc in &self.include {
            let id = cell_id(inc);
            if !cells.iter().any(|c| c.id == id) {
                cells.push(CellDef {
                    id,
                    params: inc.clone(),
                });
            }
        }
        if cells.is_empty() && self.axes.is_empty() {
            cells.push(CellDef {
                id: "default".into(),
                params: vec![],
            });
        }
        cells
    }
}

/// `--only`: a glob (`*`, `?`, `[...]`) over cell ids; without glob
/// characters, a substring of the id.
pub fn only(cells: Vec<CellDef>, pattern: &str) -> Vec<CellDef> {
    let glob = pattern.contains(['*', '?', '[']);
    cells
        .into_iter()
        .filter(|c| {
            if glob {
                crate::glob::glob_match(pattern.as_bytes(), c.id.as_bytes())
            } else {
                c.id.contains(pattern)
            }
        })
        .collect()
}

/// `--shard I/N`: cell `j` (in suite order) runs on shard `j % N + 1`, the
/// same on every machine.
pub fn shard(cells: Vec<CellDef>, i: usize, n: usize) -> Vec<CellDef> {
    cells
        .into_iter()
        .enumerate()
        .filter(|(j, _)| j % n + 1 == i)
        .map(|(_, c)| c)
        .collect()
}

/// Reads `I/N` with 1 <= I <= N.
pub fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("{s:?}: write --shard I/N with 1 <= I <= N, e.g. 2/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if i == 0 || n == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(y: &str) -> Matrix {
        serde_norway::from_str(y).unwrap()
    }

    #[test]
    fn product_exclude_include_and_ids() {
        let m = matrix(
            "allocator: [glibc, jemalloc]\nstorage:\n  - { name: small, block_cache: 32MiB, compression: lz4 }\n  - { name: large, block_cache: 256MiB }\nexclude:\n  - { allocator: glibc, storage: large }\ninclude:\n  - { allocator: mimalloc, storage: { name: tiny, block_cache: 8MiB } }\n",
        );
        let ids: Vec<String> = m.cells().into_iter().map(|c| c.id).collect();
        assert_eq!(
            ids,
            [
                "allocator=glibc,storage=small",
                "allocator=jemalloc,storage=small",
                "allocator=jemalloc,storage=large",
                "allocator=mimalloc,storage=tiny"
            ]
        );
        let c = &m.cells()[0];
        let v = c.variables();
        assert_eq!(v["storage.block_cache"], "32MiB");
        assert_eq!(v["allocator"], "glibc");
        assert_eq!(c.allocator().unwrap().name, "glibc");
    }

    #[test]
    fn only_and_shard_select_cells() {
        let m = matrix("a: [x, y, z]\nb: [1, 2]\n");
        let all = m.cells();
        assert_eq!(all.len(), 6);
        let ids = |cs: Vec<CellDef>| cs.into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(only(all.clone(), "a=y,*")), ["a=y,b=1", "a=y,b=2"]);
        assert_eq!(
            ids(only(all.clone(), "b=2")),
            ["a=x,b=2", "a=y,b=2", "a=z,b=2"]
        );
        let shards: Vec<Vec<String>> = (1..=4).map(|i| ids(shard(all.clone(), i, 4))).collect();
        assert_eq!(shards.concat().len(), 6, "every cell in exactly one shard");
        assert_eq!(shards[0], ["a=x,b=1", "a=z,b=1"]);
        assert_eq!(parse_shard("2/4").unwrap(), (2, 4));
        assert!(
            parse_shard("0/4").is_err() && parse_shard("5/4").is_err() && parse_shard("x").is_err()
        );
    }

    #[test]
    fn codecs_are_checked() {
        let e = serde_norway::from_str::<Matrix>("storage:\n  - { name: a, compression: lz5 }\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown compression `lz5`") && e.contains("did you mean `lz4`"),
            "{e}"
        );
    }
}
