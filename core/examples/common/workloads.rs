//! What simulated agents ask for.
//!
//! - [`ZipfWorkload`]: flat resources `FILE:/r/<rank>` with Zipf-skewed popularity, batches of
//!   1–8 intents (mostly MUTATES, some CONSUMES): the contended benchmark of DESIGN.md §6.
//! - [`TreeWorkload`]: a source tree (`/src/<module>/<package>/<file>.rs`) that agents edit
//!   (MUTATES a few files, CONSUMES a few others), read (CONSUMES), review whole modules
//!   (CONSUMES a directory), and now and then delete a package (DELETES a directory) or
//!   rename a module (RENAMES a directory): hierarchical intents that cover many files.

use super::rng::{Rng, Zipf};
use super::sim::{Task, Workload};

/// Picks between `lo` and `hi` (uniformly) distinct indices from `zipf`, at most `limit`.
fn distinct(zipf: &Zipf, rng: &mut Rng, (lo, hi): (u64, u64), limit: usize) -> Vec<usize> {
    let count = rng.between(lo, hi) as usize;
    let mut picked: Vec<usize> = Vec::with_capacity(count);
    while picked.len() < count.min(limit) {
        let r = zipf.sample(rng);
        if !picked.contains(&r) {
            picked.push(r);
        }
    }
    picked
}

pub struct ZipfWorkload {
    names: Vec<String>,
    zipf: Zipf,
    pub max_batch: u64,
    pub hold_ms: (u64, u64),
    pub think_ms: (u64, u64),
    /// Share of CONSUMES intents (the rest are MUTATES).
    pub read_share: f64,
}

impl ZipfWorkload {
    /// `resources` names with Zipf exponent `s` (1.0 is the classic skew).
    pub fn new(resources: usize, s: f64) -> ZipfWorkload {
        ZipfWorkload {
            names: (0..resources).map(|i| format!("FILE:/r/{i}")).collect(),
            zipf: Zipf::new(resources, s),
            max_batch: 8,
            hold_ms: (20, 200),
            think_ms: (0, 100),
            read_share: 0.25,
        }
    }
}

impl Workload for ZipfWorkload {
    fn task(&mut self, _agent: usize, rng: &mut Rng) -> Task {
        let intents = distinct(&self.zipf, rng, (1, self.max_batch), self.names.len())
            .into_iter()
            .map(|r| {
                let predicate = if rng.chance(self.read_share) {
                    "CONSUMES"
                } else {
                    "MUTATES"
                };
                format!("{predicate} {}", self.names[r])
            })
            .collect();
        Task {
            intents,
            hold_ms: rng.between(self.hold_ms.0, self.hold_ms.1),
        }
    }

    fn think_ms(&mut self, rng: &mut Rng) -> u64 {
        rng.between(self.think_ms.0, self.think_ms.1)
    }
}

pub struct TreeWorkload {
    modules: usize,
    packages: usize,
    files: usize,
    module_zipf: Zipf,
    file_zipf: Zipf,
}

impl TreeWorkload {
    /// `modules` × `packages` × `files` source files; popularity is Zipf-skewed per level.
    pub fn new(modules: usize, packages: usize, files: usize) -> TreeWorkload {
        TreeWorkload {
            modules,
            packages,
            files,
            module_zipf: Zipf::new(modules, 0.8),
            file_zipf: Zipf::new(packages * files, 0.9),
        }
    }

    fn module(&self, m: usize) -> String {
        format!("FILE:/src/m{m}")
    }

    fn package(&self, m: usize, p: usize) -> String {
        format!("FILE:/src/m{m}/p{p}")
    }

    fn file(&self, m: usize, f: usize) -> String {
        format!("FILE:/src/m{m}/p{}/f{}.rs", f / self.files, f % self.files)
    }

    pub fn file_count(&self) -> usize {
        self.modules * self.packages * self.files
    }
}

impl Workload for TreeWorkload {
    fn task(&mut self, _agent: usize, rng: &mut Rng) -> Task {
        let m = self.module_zipf.sample(rng);
        let per_module = self.packages * self.files;
        let roll = rng.below(100);
        let (intents, hold_ms) = if roll < 55 {
            // Edit 1–3 files of one module, reading 0–2 files of another.
            let mut intents: Vec<String> = distinct(&self.file_zipf, rng, (1, 3), per_module)
                .into_iter()
                .map(|f| format!("MUTATES {}", self.file(m, f)))
                .collect();
            let other = self.module_zipf.sample(rng);
            for f in distinct(&self.file_zipf, rng, (0, 2), per_module) {
                intents.push(format!("CONSUMES {}", self.file(other, f)));
            }
            (intents, rng.between(200, 2_000))
        } else if roll < 85 {
            let intents = distinct(&self.file_zipf, rng, (1, 4), per_module)
                .into_iter()
                .map(|f| format!("CONSUMES {}", self.file(m, f)))
                .collect();
            (intents, rng.between(50, 500))
        } else if roll < 95 {
            (
                vec![format!("CONSUMES {}", self.module(m))],
                rng.between(300, 1_500),
            )
        } else if roll < 98 {
            let p = rng.below(self.packages as u64) as usize;
            (
                vec![format!("DELETES {}", self.package(m, p))],
                rng.between(500, 3_000),
            )
        } else {
            (
                vec![format!("RENAMES {}", self.module(m))],
                rng.between(500, 3_000),
            )
        };
        Task { intents, hold_ms }
    }

    fn think_ms(&mut self, rng: &mut Rng) -> u64 {
        rng.between(100, 1_000)
    }
}

/// A hot spot: every task edits one or two of a handful of files, holds them briefly and
/// comes back almost at once. Long-lived agents on this workload are where priority per
/// session starved everyone but the oldest (docs/SPEC.md rev 4): the fairness run uses it.
pub struct HotSpotWorkload {
    names: Vec<String>,
}

impl HotSpotWorkload {
    /// `files` hot files (`FILE:/hot/<i>`).
    pub fn new(files: usize) -> HotSpotWorkload {
        HotSpotWorkload {
            names: (0..files).map(|i| format!("FILE:/hot/{i}")).collect(),
        }
    }
}

impl Workload for HotSpotWorkload {
    fn task(&mut self, _agent: usize, rng: &mut Rng) -> Task {
        let first = rng.below(self.names.len() as u64) as usize;
        let mut intents = vec![format!("MUTATES {}", self.names[first])];
        if rng.chance(0.5) {
            let second =
                (first + 1 + rng.below(self.names.len() as u64 - 1) as usize) % self.names.len();
            intents.push(format!("MUTATES {}", self.names[second]));
        }
        Task {
            intents,
            hold_ms: rng.between(5, 50),
        }
    }

    fn think_ms(&mut self, rng: &mut Rng) -> u64 {
        rng.between(0, 10)
    }
}
