//! Indexes into the per-CPU `COUNTERS` array.

/// Packets the tc programs parsed: every packet but those the IPv4 fast filter found
/// outside the filter in place, from their addresses (and for TCP and UDP their ports,
/// against the followed flows' hashes) (`bpf_stats` counts every run).
pub const SEEN: u32 = 0;
/// Packets that matched the filter (tracked address or flow).
pub const MATCHED: u32 = 1;
/// Events written to the ring buffer.
pub const EMITTED: u32 = 2;
/// Events lost because the ring buffer was full.
pub const RINGBUF_FULL: u32 = 3;
/// Packets the parser could not read (not IP, truncated before L3, load failure).
pub const UNPARSED: u32 = 4;
/// NAT hook invocations seen.
pub const NAT_SEEN: u32 = 5;
/// Flows added to the tracked table after a NAT rewrite.
pub const FLOWS_ADDED: u32 = 6;
/// Pending NAT brackets not found at the closing hook (table evicted or lost).
pub const NAT_UNPAIRED: u32 = 7;
/// Entries the NAT programs added to the followed-flows table (one per flow direction);
/// user space compares it with what the table still holds to count evictions.
pub const FLOW_ENTRIES: u32 = 8;
/// Batches a CPU began staging ([`crate::batch`]): one per batch, at its first record.
pub const BATCHES_BEGUN: u32 = 9;
/// Batches a CPU ended (written to the ring buffer, or lost to a full one): a CPU whose
/// `BATCHES_BEGUN` is ahead holds staged records, which user space has it flush.
pub const BATCHES_ENDED: u32 = 10;
/// Number of counters.
pub const COUNT: u32 = 11;
