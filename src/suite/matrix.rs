//! Matrices: the cartesian product of named axes, with `include` and
//! `exclude`, each cell named by its parameters (`allocator=jemalloc,storage=small`).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::values::scalar;
use crate::suite::allocator::Profile;
use crate::suite::Checks;

/// RocksDB's compression names, checked wherever a parameter is called
/// `compression` or ends in `_compression`.
pub const CODECS: [&str; 8] = [
    "none", "snappy", "zlib", "bzip2", "lz4", "lz4hc", "xpress", "zstd",
];

/// One value of an axis: its name, the fields that `${axis.field}` reads,
/// on the `allocator` axis the allocator profile, and what every cell with
/// this value must show (`expect:`, checks in place of the suite's).
#[derive(Debug, Clone, PartialEq)]
pub struct AxisValue {
    pub name: String,
    pub fields: BTreeMap<String, String>,
    pub allocator: Option<Profile>,
    pub expect: Option<Checks>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Matrix {
    /// Axes in the order written.
    pub axes: Vec<(String, Vec<AxisValue>)>,
    pub include: Vec<Include>,
    pub exclude: Vec<BTreeMap<String, String>>,
}

/// An `include` entry: a cell to add, or, with `expect` and values that
/// cells of the product already have, what those cells must show.
#[derive(Debug, Clone, PartialEq)]
pub struct Include {
    pub params: Vec<(String, AxisValue)>,
    pub expect: Option<Checks>,
}

/// One cell: an id, its parameters, and what it is expected to show
/// beyond the suite's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct CellDef {
    pub id: String,
    pub params: Vec<(String, AxisValue)>,
    pub expect: Option<Checks>,
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

/// Takes `expect:` out of a map: checks, read as the suite's are.
fn take_expect(v: &mut serde_norway::Value) -> Result<Option<Checks>, String> {
    let serde_norway::Value::Mapping(m) = v else {
        return Ok(None);
    };
    match m.remove("expect") {
        None => Ok(None),
        Some(e) => serde_path_to_error::deserialize(e).map(Some).map_err(|e| {
            let path = e.path().to_string();
            if path == "." || path.is_empty() {
                format!("expect: {}", e.inner())
            } else {
                format!("expect.{path}: {}", e.inner())
            }
        }),
    }
}

fn axis_value(axis: &str, mut v: serde_norway::Value) -> Result<AxisValue, String> {
    let expect = take_expect(&mut v)?;
    let mut value = plain_axis_value(axis, v)?;
    value.expect = expect;
    Ok(value)
}

fn plain_axis_value(axis: &str, v: serde_norway::Value) -> Result<AxisValue, String> {
    if axis == "allocator" {
        let p: Profile = serde_norway::from_value(v).map_err(|e| e.to_string())?;
        return Ok(AxisValue {
            name: p.name.clone(),
            fields: BTreeMap::new(),
            allocator: Some(p),
            expect: None,
        });
    }
    if let Some(s) = scalar(&v) {
        check_codec(axis, &s)?;
        return Ok(AxisValue {
            name: s,
            fields: BTreeMap::new(),
            allocator: None,
            expect: None,
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
        expect: None,
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
                            let entries: Vec<serde_norway::Value> = map.next_value()?;
                            for (i, mut e) in entries.into_iter().enumerate() {
                                let expect = take_expect(&mut e)
                                    .map_err(|e| de::Error::custom(format!("include[{i}].{e}")))?;
                                let serde_norway::Value::Mapping(e) = e else {
                                    return Err(de::Error::custom(format!("include[{i}]: an entry is a map of axis values, e.g. {{ allocator: glibc, cache: 256MiB }}")));
                                };
                                let mut params = vec![];
                                for (k, v) in e {
                                    let k = scalar(&k)
                                        .ok_or_else(|| de::Error::custom("axis names are words"))?;
                                    params.push((
                                        k.clone(),
                                        axis_value(&k, v).map_err(de::Error::custom)?,
                                    ));
                                }
                                m.include.push(Include { params, expect });
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

/// A cell's expectations: its values' `expect`s in axis order, then an
/// include's over them.
fn expect_of(params: &[(String, AxisValue)], include: Option<&Checks>) -> Option<Checks> {
    params
        .iter()
        .filter_map(|(_, v)| v.expect.as_ref())
        .chain(include)
        .fold(None, |acc: Option<Checks>, e| {
            Some(acc.map_or_else(|| e.clone(), |a| a.overlaid(e)))
        })
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
                expect: expect_of(&params, None),
                params,
            })
            .collect();
        for inc in &self.include {
            // With `expect`, an entry whose values cells already have
            // says what those cells must show.
            let selects = |c: &CellDef| {
                inc.params
                    .iter()
                    .all(|(a, v)| c.params.iter().any(|(ca, cv)| ca == a && cv.name == v.name))
            };
            if let Some(over) = inc.expect.as_ref().filter(|_| cells.iter().any(selects)) {
                for c in cells.iter_mut().filter(|c| selects(c)) {
                    c.expect = Some(match &c.expect {
                        Some(e) => e.overlaid(over),
                        None => over.clone(),
                    });
                }
                continue;
            }
            let id = cell_id(&inc.params);
            if !cells.iter().any(|c| c.id == id) {
                cells.push(CellDef {
                    id,
                    expect: expect_of(&inc.params, inc.expect.as_ref()),
                    params: inc.params.clone(),
                });
            }
        }
        if cells.is_empty() && self.axes.is_empty() {
            cells.push(CellDef {
                id: "default".into(),
                params: vec![],
                expect: None,
            });
        }
        cells
    }
}

/// Whether `--only PATTERN` selects the cell: a glob (`*`, `?`, `[...]`)
/// over cell ids; without glob characters, a substring of the id.
pub fn matches(cell: &CellDef, pattern: &str) -> bool {
    if pattern.contains(['*', '?', '[']) {
        crate::glob::glob_match(pattern.as_bytes(), cell.id.as_bytes())
    } else {
        cell.id.contains(pattern)
    }
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
    fn expectations_come_from_values_and_from_includes_that_select_cells() {
        let m = matrix(
            "allocator:\n  - glibc\n  - { jemalloc: {}, expect: { oom_kills: 0, peak_memory: { max: 85% } } }\ncache: [256MiB, 32MiB]\ninclude:\n  - { allocator: glibc, cache: 256MiB, expect: { oom_kills: \">= 1\" } }\n  - { allocator: mimalloc, cache: 8MiB, expect: { crashes: 0 } }\n",
        );
        let cells = m.cells();
        let by = |id: &str| cells.iter().find(|c| c.id == id).unwrap();
        // An include with `expect` that names cells of the product adds none.
        assert_eq!(cells.len(), 5);
        let e = by("allocator=glibc,cache=256MiB").expect.clone().unwrap();
        assert_eq!(e.oom_kills.unwrap().min, Some(1));
        assert_eq!(by("allocator=glibc,cache=32MiB").expect, None);
        let j = by("allocator=jemalloc,cache=32MiB").expect.clone().unwrap();
        assert_eq!(j.oom_kills.unwrap().max, Some(0));
        assert_eq!(
            j.peak_memory[0].max,
            crate::suite::values::Bound::OfLimit(0.85)
        );
        // An include of a new cell carries its own.
        let n = by("allocator=mimalloc,cache=8MiB").expect.clone().unwrap();
        assert_eq!(n.crashes.unwrap().max, Some(0));
    }

    #[test]
    fn count_limits_read_as_bounds() {
        use crate::suite::CountCheck;
        let c = |y: &str| serde_norway::from_str::<CountCheck>(y);
        assert_eq!(c("0").unwrap().max, Some(0));
        assert_eq!(c("\">= 1\"").unwrap().min, Some(1));
        assert_eq!(c("\"> 0\"").unwrap().min, Some(1));
        assert_eq!(c("\"< 4\"").unwrap().max, Some(3));
        let exact = c("\"== 2\"").unwrap();
        assert!(exact.holds(2) && !exact.holds(1) && !exact.holds(3));
        assert!(c("\">= 1\"").unwrap().holds(4));
        assert!(!c("\">= 1\"").unwrap().holds(0));
        assert_eq!(c("{ min: 1, max: 3 }").unwrap().describe(), "1..3");
        assert!(c("\"< 0\"").is_err());
        assert!(c("{ severity: warn }").is_err());
        assert!(c("\"about 3\"")
            .unwrap_err()
            .to_string()
            .contains("not a count limit"));
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
        let only = |cs: Vec<CellDef>, p: &str| -> Vec<CellDef> {
            cs.into_iter().filter(|c| matches(c, p)).collect()
        };
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
