//! Which key an operation touches: uniform, zipfian, sequential or latest.
//!
//! Zipfian follows J. Gray et al., "Quickly Generating Billion-Record
//! Synthetic Databases", SIGMOD 1994 (the generator YCSB uses): rank `i`
//! (0-based) is drawn with probability proportional to `1 / (i + 1)^theta`,
//! in O(1) per draw after an O(n) sum. Rank 0 is the hottest key.

use rand::Rng;
use serde::Deserialize;

/// How keys are chosen, per suite: `uniform` (default), `sequential`,
/// `{ zipfian: 0.99 }`, `latest` or `{ latest: 0.99 }`.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every key equally likely.
    #[default]
    Uniform,
    /// Key 0, 1, 2, ... and around again: a fill, a scan-like load.
    Sequential,
    /// A few hot keys (the lowest numbers): parameter theta in (0, 1),
    /// YCSB's default 0.99.
    Zipfian(f64),
    /// Writes append (sequentially, like blocks or log records); reads and
    /// deletes touch recent writes most, zipfian over how far back.
    Latest(f64),
}

const NAMES: [&str; 4] = ["uniform", "sequential", "zipfian", "latest"];

impl<'de> Deserialize<'de> for Distribution {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Param(std::collections::BTreeMap<String, f64>),
        }
        let unknown = |name: &str| {
            D::Error::custom(format!(
                "unknown distribution `{name}`{}; distributions: uniform, sequential, {{ zipfian: 0.99 }}, latest, {{ latest: 0.99 }}",
                crate::units::did_you_mean(name, NAMES.iter().copied())
            ))
        };
        let raw = Raw::deserialize(d).map_err(|_| {
            D::Error::custom("a distribution is a name (`uniform`, `sequential`, `latest`) or `{ zipfian: THETA }` / `{ latest: THETA }`")
        })?;
        match raw {
            Raw::Name(n) => match n.as_str() {
                "uniform" => Ok(Distribution::Uniform),
                "sequential" => Ok(Distribution::Sequential),
                "latest" => Ok(Distribution::Latest(0.99)),
                "zipfian" => Ok(Distribution::Zipfian(0.99)),
                other => Err(unknown(other)),
            },
            Raw::Param(m) if m.len() == 1 => {
                let (k, t) = m.into_iter().next().expect("one entry");
                match k.as_str() {
                    "zipfian" => Ok(Distribution::Zipfian(t)),
                    "latest" => Ok(Distribution::Latest(t)),
                    "uniform" | "sequential" => Err(D::Error::custom(format!(
                        "`{k}` takes no parameter: write `distribution: {k}`"
                    ))),
                    other => Err(unknown(other)),
                }
            }
            Raw::Param(_) => Err(D::Error::custom(
                "one distribution, e.g. `{ zipfian: 0.99 }`",
            )),
        }
    }
}

impl Distribution {
    /// Why the parameter is out of range, if it is.
    pub fn problem(&self) -> Option<String> {
        match self {
            Distribution::Zipfian(t) | Distribution::Latest(t) if !(*t > 0.0 && *t < 1.0) => Some(
                format!("theta must be between 0 and 1 (exclusive), e.g. 0.99; got {t}"),
            ),
            _ => None,
        }
    }
}

/// Gray et al.'s zipfian generator over ranks 0..n.
#[derive(Debug, Clone)]
struct Zipf {
    n: f64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let nf = n as f64;
        Zipf {
            n: nf,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / nf).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    fn draw(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) && self.n >= 2.0 {
            return 1;
        }
        let r = (self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n as u64 - 1)
    }
}

/// Chooses key indexes in 0..n for one load connection.
#[derive(Debug, Clone)]
pub struct Chooser {
    kind: Distribution,
    n: u64,
    zipf: Option<Zipf>,
    /// Sequential: the next index. Latest: the newest written index + 1.
    next: u64,
}

impl Chooser {
    pub fn new(kind: Distribution, n: u64) -> Chooser {
        let zipf = match kind {
            Distribution::Zipfian(t) | Distribution::Latest(t) if n > 0 => Some(Zipf::new(n, t)),
            _ => None,
        };
        Chooser {
            kind,
            n,
            zipf,
            next: 0,
        }
    }

    /// The index of the key the next operation touches; `write` for a SET.
    pub fn pick(&mut self, rng: &mut impl Rng, write: bool) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        Some(match self.kind {
            Distribution::Uniform => rng.random_range(0..self.n),
            Distribution::Sequential => {
                let k = self.next % self.n;
                self.next += 1;
                k
            }
            Distribution::Zipfian(_) => self.zipf.as_ref()?.draw(rng),
            Distribution::Latest(_) => {
                if write {
                    let k = self.next % self.n;
                    self.next += 1;
                    k
                } else {
                    // How far back from the newest write, zipfian.
                    let back = self.zipf.as_ref()?.draw(rng);
                    (self.next + self.n - 1 - back % self.n) % self.n
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn counts(kind: Distribution, n: u64, draws: usize, write: bool) -> Vec<u64> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut c = Chooser::new(kind, n);
        let mut out = vec![0u64; n as usize];
        for _ in 0..draws {
            out[c.pick(&mut rng, write).unwrap() as usize] += 1;
        }
        out
    }

    #[test]
    fn uniform_is_flat() {
        let c = counts(Distribution::Uniform, 100, 200_000, true);
        // Pearson's chi-square with 99 degrees of freedom: < 148 at p = 0.001.
        let e = 2000.0;
        let chi2: f64 = c.iter().map(|&o| (o as f64 - e).powi(2) / e).sum();
        assert!(chi2 < 148.0, "chi2 {chi2}");
    }

    #[test]
    fn zipfian_follows_its_law() {
        let theta = 0.99;
        let n = 10_000;
        let draws = 1_000_000;
        let c = counts(Distribution::Zipfian(theta), n, draws, false);
        // Rank 0 against rank 1 and rank 9: 2^theta and 10^theta.
        let r1 = c[0] as f64 / c[1] as f64;
        let r9 = c[0] as f64 / c[9] as f64;
        assert!((r1 - 2f64.powf(theta)).abs() < 0.1, "{r1}");
        assert!((r9 - 10f64.powf(theta)).abs() < 1.0, "{r9}");
        // The hottest 1% of keys take the share the law gives them.
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let expected = zeta(n / 100) / zeta(n);
        let top: u64 = c[..(n / 100) as usize].iter().sum();
        let share = top as f64 / draws as f64;
        assert!((share - expected).abs() < 0.02, "{share} vs {expected}");
        // And every key can come up.
        assert!(c[n as usize / 2..].iter().sum::<u64>() > 0);
    }

    #[test]
    fn sequential_goes_round_in_order() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut c = Chooser::new(Distribution::Sequential, 3);
        let got: Vec<u64> = (0..7).map(|_| c.pick(&mut rng, false).unwrap()).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn latest_reads_what_was_just_written() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let mut c = Chooser::new(Distribution::Latest(0.99), 1000);
        for _ in 0..500 {
            c.pick(&mut rng, true);
        }
        // Newest write is key 499: reads cluster just behind it.
        let reads: Vec<u64> = (0..10_000)
            .map(|_| c.pick(&mut rng, false).unwrap())
            .collect();
        let newest = reads.iter().filter(|&&k| k == 499).count();
        let recent = reads.iter().filter(|&&k| (400..=499).contains(&k)).count();
        assert!(newest > 1000, "{newest}");
        assert!(recent > 6000, "{recent}");
        // Writes go on appending.
        assert_eq!(c.pick(&mut rng, true), Some(500));
    }

    #[test]
    fn theta_out_of_range_is_refused() {
        assert!(Distribution::Zipfian(1.0).problem().is_some());
        assert!(Distribution::Zipfian(0.0).problem().is_some());
        assert!(Distribution::Latest(0.5).problem().is_none());
    }
}
