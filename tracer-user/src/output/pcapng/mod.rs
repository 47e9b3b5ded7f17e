//! `-w FILE` / `-w -`: the frames of the shown journeys as a pcapng file that Wireshark and
//! tshark open, beside the text or JSON output ([`PcapSink`] wraps that sink).
//!
//! Each tc step of a journey is an Enhanced Packet Block: the frame as that hook saw it (up to
//! `--snaplen` bytes, which the kernel copied into the step's ring record), on an interface
//! block named after the hook (`azv47c3ee9d512 ingress`, link type Ethernet, nanosecond
//! timestamps), with the journey in its comment ([`comment`]). A journey is written whole,
//! when it is complete. The kernel's clock (`CLOCK_MONOTONIC`) is turned into wall time by one
//! offset measured at start. A tc step whose frame is not there (the uplink ingress of a
//! connection's first packet, which the NAT program reported for tc; or a frame let go, see
//! `collect::frames`) is written as an empty packet whose comment says so: every tc step is a
//! packet. The file is flushed with every batch of journeys and at the end.

pub mod comment;

use std::{
    borrow::Cow,
    collections::HashMap,
    io::{self, Write},
    sync::PoisonError,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use pcap_file::{
    DataLink, PcapError,
    pcapng::{
        PcapNgWriter,
        blocks::{
            enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption},
            interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption},
        },
    },
};
use tracer_common::TcHook;

use super::Sink;
use crate::{
    collect::frames::{Held, Shared},
    diag,
    journey::{Journey, Step, StepKind, unanswered::NoAnswer},
    summary::Summary,
};

/// `if_tsresol` of every interface block: timestamps in nanoseconds (10^-9 s).
const TS_RESOL_NS: u8 = 9;

/// The pcapng output, in front of the text or JSON sink.
pub struct PcapSink {
    inner: Box<dyn Sink + Send>,
    /// False with `-w -`: journeys go to the pcapng only (the rest still goes to `inner`).
    print_journeys: bool,
    out: PcapNgWriter<Box<dyn Write + Send>>,
    /// Interface block number of each hook's name (`eth0 egress`).
    ifaces: HashMap<String, u32>,
    frames: Shared,
    snaplen: u32,
    /// Wall-clock nanoseconds minus kernel monotonic nanoseconds, measured at start.
    wall_offset_ns: i128,
    pod: String,
    journeys: u64,
    packets: u64,
    /// Packets written without their frame.
    empty: u64,
}

/// Wall-clock minus monotonic time now, in nanoseconds: what turns the kernel's
/// `bpf_ktime_get_ns` into a timestamp.
#[must_use]
pub fn wall_offset_ns(monotonic_ns: u64) -> i128 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
    wall - i128::from(monotonic_ns)
}

fn io_error(e: PcapError) -> io::Error {
    match e {
        PcapError::IoError(e) => e,
        other => io::Error::other(other),
    }
}

/// What a pcapng needs besides where it goes.
pub struct Options {
    /// False with `-w -` (the journeys are not printed).
    pub print_journeys: bool,
    pub snaplen: u32,
    pub wall_offset_ns: i128,
    pub pod: String,
}

impl PcapSink {
    /// Writes the section header to `out` and puts the capture in front of `inner`.
    ///
    /// # Errors
    /// Writing the section header failed.
    pub fn new(
        inner: Box<dyn Sink + Send>,
        out: Box<dyn Write + Send>,
        frames: Shared,
        o: Options,
    ) -> io::Result<Self> {
        Ok(Self {
            inner,
            print_journeys: o.print_journeys,
            out: PcapNgWriter::new(out).map_err(io_error)?,
            ifaces: HashMap::new(),
            frames,
            snaplen: o.snaplen,
            wall_offset_ns: o.wall_offset_ns,
            pod: o.pod,
            journeys: 0,
            packets: 0,
            empty: 0,
        })
    }

    /// The interface block of `name`, written the first time it is used.
    fn iface(&mut self, name: String) -> io::Result<u32> {
        if let Some(&id) = self.ifaces.get(&name) {
            return Ok(id);
        }
        let id = u32::try_from(self.ifaces.len()).map_err(io::Error::other)?;
        let block = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: self.snaplen,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(name.clone())),
                InterfaceDescriptionOption::IfTsResol(TS_RESOL_NS),
            ],
        };
        self.out.write_pcapng_block(block).map_err(io_error)?;
        self.ifaces.insert(name, id);
        Ok(id)
    }

    /// One packet: the tc step `step`, its frame if held, and its comment.
    fn packet(&mut self, step: &Step, held: Option<Held>, comment: String) -> io::Result<()> {
        let StepKind::Tc { hook, iface, .. } = &step.kind else {
            return Ok(());
        };
        let side = match hook {
            TcHook::Ingress => "ingress",
            TcHook::Egress => "egress",
        };
        let name = format!("{} {side}", iface.as_deref().unwrap_or("?"));
        let interface_id = self.iface(name)?;
        let wall = i128::from(step.ktime_ns) + self.wall_offset_ns;
        let timestamp = Duration::from_nanos(u64::try_from(wall).unwrap_or(0));
        let (data, original_len) =
            held.map_or((Vec::new(), 0), |h| (h.bytes.into_vec(), h.orig_len));
        let block = EnhancedPacketBlock {
            interface_id,
            timestamp,
            original_len,
            data: Cow::Owned(data),
            options: vec![EnhancedPacketOption::Comment(Cow::Owned(comment))],
        };
        self.out.write_pcapng_block(block).map_err(io_error)?;
        self.packets += 1;
        Ok(())
    }

    /// Writes `j`'s tc steps as packets.
    fn write_journey(&mut self, j: &Journey) -> io::Result<()> {
        self.journeys += 1;
        let shared = comment::journey_lines(j);
        let tc: Vec<&Step> = j.steps.iter().filter(|s| tc_hook(s).is_some()).collect();
        let frames = std::sync::Arc::clone(&self.frames);
        let mut frames = frames.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, step) in tc.iter().enumerate() {
            let held = tc_hook(step).and_then(|hook| frames.take(hook, step.ktime_ns, &step.tuple));
            let mut text =
                comment::comment(self.journeys, (i + 1, tc.len()), step, &self.pod, &shared);
            if held.is_none() {
                self.empty += 1;
                text.push_str(if step.time_bound() {
                    " | frame not captured: the NAT program reported this hook's packet"
                } else {
                    " | frame not captured: it was let go before its journey was written"
                });
            }
            self.packet(step, held, text)?;
        }
        Ok(())
    }
}

/// The tc hook of a tc step; `None` for the other kinds.
fn tc_hook(step: &Step) -> Option<TcHook> {
    match &step.kind {
        StepKind::Tc { hook, .. } => Some(*hook),
        StepKind::Nat(_) | StepKind::Drop(_) => None,
    }
}

impl Sink for PcapSink {
    fn journey(&mut self, j: &Journey) -> io::Result<()> {
        if j.steps.is_empty() {
            return Ok(());
        }
        self.write_journey(j)?;
        if self.print_journeys {
            self.inner.journey(j)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.get_mut().flush()?;
        self.inner.flush()
    }

    fn loss(&mut self, lost_new: u64, lost_total: u64) -> io::Result<()> {
        self.inner.loss(lost_new, lost_total)
    }

    fn evicted(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.inner.evicted(new, total)
    }

    fn evicted_flows(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.inner.evicted_flows(new, total)
    }

    fn no_answer(&mut self, n: &NoAnswer) -> io::Result<()> {
        self.inner.no_answer(n)
    }

    fn evicted_connections(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.inner.evicted_connections(new, total)
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.out.get_mut().flush()?;
        let dropped = self
            .frames
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dropped();
        diag::line(format_args!(
            "pcapng: {} of {} written ({} without their frame; {} frames of journeys not \
             written let go)",
            super::count(self.packets, "packet"),
            super::count(self.journeys, "journey"),
            self.empty,
            dropped
        ));
        self.inner.summary(s)
    }
}

#[cfg(test)]
mod tests;
