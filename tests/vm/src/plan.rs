//! Which VM runs what: every (hook, test binary) pair is one run; the runs are dealt to the
//! VMs that run side by side (each is single-threaded TCG, so one per CPU is what makes the
//! tier fit its time budget), longest first to the least loaded VM, a binary's weight being
//! the number of its tests that the filter selects (`--list`) plus one for its start.

use std::{fs, path::Path, process::Command, thread};

use xtask_common::cmd::capture;

/// One test binary run under one NAT hook, as `/init` gets it: `hook:binary`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Run {
    pub hook: String,
    pub binary: String,
}

impl Run {
    /// `hook:binary`.
    #[must_use]
    pub fn spec(&self) -> String {
        format!("{}:{}", self.hook, self.binary)
    }
}

/// Every hook × binary pair, hook by hook.
#[must_use]
pub fn runs(hooks: &[String], binaries: &[String]) -> Vec<Run> {
    hooks
        .iter()
        .flat_map(|hook| {
            binaries.iter().map(|binary| Run {
                hook: hook.clone(),
                binary: binary.clone(),
            })
        })
        .collect()
}

/// `runs` dealt to at most `jobs` VMs: heaviest first, each to the VM with the least weight
/// so far (ties: the first); `weight` gives a binary's weight. No VM is left empty.
///
/// # Panics
/// Never: at least one VM is made, so each run has one to go to.
#[must_use]
pub fn deal(runs: &[Run], jobs: usize, weight: impl Fn(&str) -> usize) -> Vec<Vec<Run>> {
    let count = jobs.clamp(1, runs.len().max(1));
    let mut order: Vec<&Run> = runs.iter().collect();
    order.sort_by_key(|r| std::cmp::Reverse(weight(&r.binary)));
    let mut vms: Vec<(usize, Vec<Run>)> = vec![(0, Vec::new()); count];
    for run in order {
        let (load, share) = vms
            .iter_mut()
            .min_by_key(|(load, _)| *load)
            .expect("at least one VM");
        *load += weight(&run.binary);
        share.push(run.clone());
    }
    vms.into_iter()
        .map(|(_, share)| share)
        .filter(|s| !s.is_empty())
        .collect()
}

/// How many tests of `binary` the harness arguments `filter` select, plus one (the
/// binary's own start); 1 when it cannot be listed.
#[must_use]
pub fn weight_of(binary: &Path, filter: &[String]) -> usize {
    let out = capture(
        Command::new(binary)
            .args(["--list", "--format=terse"])
            .args(filter),
    );
    let tests = out.ok().filter(|o| o.status.success()).map_or(0, |o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.ends_with(": test"))
            .count()
    });
    tests + 1
}

/// How many VMs to run side by side: `requested`, else one per CPU, at most as many as
/// the memory holds (`memory_mb` each, plus qemu's own) and as there are runs.
#[must_use]
pub fn jobs(requested: usize, runs: usize, memory_mb: u32) -> usize {
    if requested > 0 {
        return requested;
    }
    let cpus = thread::available_parallelism().map_or(1, usize::from);
    let per_vm_kb = (u64::from(memory_mb) + 512) * 1024;
    let by_memory = available_memory_kb().map_or(1, |kb| kb / per_vm_kb);
    let by_memory = usize::try_from(by_memory).unwrap_or(1);
    cpus.min(by_memory).min(runs).max(1)
}

/// `MemAvailable` of /proc/meminfo, in KiB.
fn available_memory_kb() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn weight(binary: &str) -> usize {
        match binary {
            "lifecycle" => 8,
            "journeys" => 5,
            "nat_hooks" => 4,
            "dist" => 3,
            _ => 1,
        }
    }

    fn specs(vm: &[Run]) -> Vec<String> {
        vm.iter().map(Run::spec).collect()
    }

    #[test]
    fn two_vms_take_one_hook_each_when_the_weights_say_so() {
        let all = runs(
            &owned(&["kprobe", "fentry"]),
            &owned(&["journeys", "lifecycle", "nat_hooks", "dist", "tests"]),
        );
        assert_eq!(all.len(), 10);
        assert_eq!(all[0].spec(), "kprobe:journeys");
        let vms = deal(&all, 2, weight);
        assert_eq!(
            specs(&vms[0]),
            [
                "kprobe:lifecycle",
                "kprobe:journeys",
                "kprobe:nat_hooks",
                "kprobe:dist",
                "kprobe:tests"
            ]
        );
        assert_eq!(vms[1].len(), 5);
        assert!(vms[1].iter().all(|r| r.hook == "fentry"));
    }

    #[test]
    fn more_vms_balance_the_weight() {
        let all = runs(
            &owned(&["kprobe", "fentry"]),
            &owned(&["journeys", "lifecycle", "nat_hooks", "dist", "tests"]),
        );
        let vms = deal(&all, 4, weight);
        let loads: Vec<usize> = vms
            .iter()
            .map(|vm| vm.iter().map(|r| weight(&r.binary)).sum())
            .collect();
        assert_eq!(loads.iter().sum::<usize>(), 42);
        assert!(
            loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 3,
            "{loads:?}"
        );
        // Never more VMs than runs, never an empty one.
        assert_eq!(deal(&all[..3], 8, weight).len(), 3);
        assert_eq!(deal(&all, 1, weight)[0].len(), 10);
    }
}
