//! What the kernel says about a running pktrace: its programs' run time and run count (BPF
//! run-time statistics), and its per-CPU counters (events emitted, lost to a full ring buffer).
//!
//! Programs and maps are found through the process's own file descriptors
//! (`/proc/<pid>/fdinfo`: `prog_id`, `map_id`), so other pktrace processes on the machine (the
//! integration tests, another bench) never mix in; programs are read by id through aya, maps
//! by `bpftool -j`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    os::fd::OwnedFd,
};

use anyhow::{Context as _, Result, bail};
use aya::programs::{ProgramError, ProgramInfo, loaded_programs};
use serde_json::Value;
use xtask_common::cmd::{command, output};

/// `kernel.bpf_stats_enabled`, the global switch of BPF run-time statistics.
const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// BPF run-time statistics, on while this lives.
///
/// Taken with `BPF_ENABLE_STATS` (aya's `enable_stats`): the kernel counts the holder of the returned fd as one more
/// reason to keep statistics on and forgets it when the fd closes, even if the bench is
/// SIGKILLed. The sysctl `kernel.bpf_stats_enabled` is never written and keeps showing its own
/// value (the kernel keeps the fd holders apart from it, kernel/bpf/syscall.c and
/// `bpf_stats_handler`, v6.1). Kernels without `BPF_ENABLE_STATS` (< 5.8) get the sysctl set
/// and its previous value restored on drop.
#[must_use = "statistics stop when the guard is dropped"]
pub enum RunStats {
    Fd(#[expect(dead_code, reason = "held only to keep statistics on")] OwnedFd),
    Sysctl { previous: String },
}

impl RunStats {
    pub fn enable() -> Result<Self> {
        if let Ok(fd) = aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            return Ok(Self::Fd(fd));
        }
        let previous = fs::read_to_string(STATS_SYSCTL)
            .with_context(|| format!("BPF_ENABLE_STATS failed and {STATS_SYSCTL} is unreadable"))?;
        fs::write(STATS_SYSCTL, "1").with_context(|| format!("enabling {STATS_SYSCTL}"))?;
        Ok(Self::Sysctl {
            previous: previous.trim().to_owned(),
        })
    }
}

impl Drop for RunStats {
    fn drop(&mut self) {
        if let Self::Sysctl { previous } = self
            && let Err(err) = fs::write(STATS_SYSCTL, previous.as_bytes())
        {
            eprintln!("bench: restoring {STATS_SYSCTL} to {previous} failed: {err}");
        }
    }
}

/// The ids of the programs and maps process `pid` holds (directly or through links).
pub fn owned_ids(pid: i32) -> Result<(BTreeSet<u32>, BTreeSet<u32>)> {
    let dir = format!("/proc/{pid}/fdinfo");
    let (mut progs, mut maps) = (BTreeSet::new(), BTreeSet::new());
    for entry in fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let Ok(text) = fs::read_to_string(entry?.path()) else {
            continue;
        };
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(id) = value.parse::<u32>() else {
                continue;
            };
            match key {
                "prog_id:" => progs.insert(id),
                "map_id:" => maps.insert(id),
                _ => false,
            };
        }
    }
    Ok((progs, maps))
}

/// Cumulative run time and run count of one program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgRun {
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The name a program's statistics are filed under: its own, except that builds before one
/// netfilter program served every hook had one per hook (`nf_pre_enter`, …, `nf_in_exit`),
/// which add up under today's `nf_enter` and `nf_exit`, so a baseline of such a build still
/// compares.
fn stats_name(name: &str) -> String {
    match name.strip_prefix("nf_") {
        Some(rest) if rest.ends_with("_enter") => "nf_enter".to_owned(),
        Some(rest) if rest.ends_with("_exit") => "nf_exit".to_owned(),
        _ => name.to_owned(),
    }
}

/// Run statistics of the programs `ids`, by program name ([`stats_name`]; programs sharing a
/// name add up): `run_time_ns` and `run_cnt` of each program's `bpf_prog_info`.
pub fn prog_runs(ids: &BTreeSet<u32>) -> Result<BTreeMap<String, ProgRun>> {
    let mut runs: BTreeMap<String, ProgRun> = BTreeMap::new();
    for prog in programs(ids)? {
        let entry = runs
            .entry(stats_name(prog.name_as_str().unwrap_or("?")))
            .or_default();
        entry.run_time_ns += u64::try_from(prog.run_time().as_nanos()).unwrap_or(u64::MAX);
        entry.run_cnt += prog.run_count();
    }
    Ok(runs)
}

/// The id of the program named `name` among `ids`.
pub fn prog_id_named(ids: &BTreeSet<u32>, name: &str) -> Result<u32> {
    programs(ids)?
        .into_iter()
        .find(|p| p.name_as_str() == Some(name))
        .map(|p| p.id())
        .with_context(|| format!("pktrace holds no program named {name}"))
}

/// The loaded programs whose ids are in `ids` (a program unloaded meanwhile is left out).
fn programs(ids: &BTreeSet<u32>) -> Result<Vec<ProgramInfo>> {
    let mut found = Vec::new();
    for prog in loaded_programs() {
        match prog {
            Ok(info) if ids.contains(&info.id()) => found.push(info),
            Ok(_) => {}
            // Gone between listing its id and opening it.
            Err(ProgramError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).context("listing the loaded BPF programs"),
        }
    }
    Ok(found)
}

/// The kernel counters of one pktrace (`COUNTERS`, summed over CPUs), indexed like
/// `tracer_common::counter`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    pub seen: u64,
    pub matched: u64,
    pub emitted: u64,
    pub ringbuf_full: u64,
    /// Flows the NAT programs began to follow (`FLOWS_ADDED`).
    pub flows_added: u64,
}

impl KernelCounters {
    /// Counts since `earlier`.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            seen: self.seen.saturating_sub(earlier.seen),
            matched: self.matched.saturating_sub(earlier.matched),
            emitted: self.emitted.saturating_sub(earlier.emitted),
            ringbuf_full: self.ringbuf_full.saturating_sub(earlier.ringbuf_full),
            flows_added: self.flows_added.saturating_sub(earlier.flows_added),
        }
    }
}

/// The id of the `COUNTERS` map among `maps`.
pub fn counters_map(maps: &BTreeSet<u32>) -> Result<u32> {
    for &id in maps {
        let text = output(&mut command(
            "bpftool",
            ["-j", "map", "show", "id", &id.to_string()],
        ))?;
        let json: Value = serde_json::from_str(&text).context("parsing `bpftool -j map show`")?;
        if json.get("name").and_then(Value::as_str) == Some("COUNTERS") {
            return Ok(id);
        }
    }
    bail!("pktrace holds no COUNTERS map (maps {maps:?})")
}

/// Reads the `COUNTERS` map `id`.
pub fn counters(id: u32) -> Result<KernelCounters> {
    let text = output(&mut command(
        "bpftool",
        ["-j", "map", "dump", "id", &id.to_string()],
    ))?;
    let json: Value = serde_json::from_str(&text).context("parsing `bpftool -j map dump`")?;
    let mut sums = [0u64; 7];
    for entry in json.as_array().into_iter().flatten() {
        let Some(index) = entry
            .get("key")
            .map(le_bytes)
            .and_then(|k| usize::try_from(k).ok())
        else {
            continue;
        };
        if let Some(slot) = sums.get_mut(index) {
            *slot = entry
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.get("value"))
                .map(le_bytes)
                .fold(0, u64::wrapping_add);
        }
    }
    // Indexes 4 (UNPARSED) and 5 (NAT_SEEN) are not reported.
    let [seen, matched, emitted, ringbuf_full, _, _, flows_added] = sums;
    Ok(KernelCounters {
        seen,
        matched,
        emitted,
        ringbuf_full,
        flows_added,
    })
}

/// A little-endian integer from bpftool's `["0x0c","0x00",…]` byte list (or a plain number,
/// when bpftool formats with BTF).
fn le_bytes(value: &Value) -> u64 {
    if let Some(n) = value.as_u64() {
        return n;
    }
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|b| u8::from_str_radix(b.trim_start_matches("0x"), 16).ok())
        .take(8)
        .enumerate()
        .fold(0, |acc, (i, b)| acc | (u64::from(b) << (8 * i)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_bpftool_byte_lists() {
        assert_eq!(le_bytes(&json!(["0x0c", "0x01", "0x00", "0x00"])), 0x010c);
        assert_eq!(le_bytes(&json!(7)), 7);
        assert_eq!(le_bytes(&json!("x")), 0);
    }

    #[test]
    fn per_hook_netfilter_programs_of_older_builds_file_under_todays_names() {
        for (name, filed) in [
            ("nf_pre_enter", "nf_enter"),
            ("nf_in_exit", "nf_exit"),
            ("nf_enter", "nf_enter"),
            ("nf_exit", "nf_exit"),
            ("tc_egress", "tc_egress"),
            ("nat_kprobe_ent", "nat_kprobe_ent"),
        ] {
            assert_eq!(stats_name(name), filed);
        }
    }
}
