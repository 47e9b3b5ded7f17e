//! The oracle of what the node forwarded: `tcpdump -p -i any` in the node namespace, every
//! IPv4 frame with its interface and direction, read back from the pcap file.
//!
//! `-i any` with the `LINUX_SLL2` link type gives each frame's interface index and packet type
//! (`PACKET_OUTGOING` for a frame sent, anything else for one received), so one process sees
//! every hop in both directions. `-p` keeps the interfaces out of promiscuous mode (a bridge
//! port in promiscuous mode is not what pktrace runs beside; `any` cannot be promiscuous anyway,
//! the flag makes sure).

use std::{
    collections::HashMap,
    fs,
    net::Ipv4Addr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use xtask::lab::in_ns;

/// One IPv4 frame as one interface saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Capture time, microseconds.
    pub t_us: u64,
    pub ifindex: u32,
    /// Sent (egress) rather than received (ingress).
    pub outgoing: bool,
    /// IP protocol number.
    pub proto: u8,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// Ports (TCP, UDP); `None` for other protocols.
    pub ports: Option<(u16, u16)>,
    pub ip_id: u16,
    /// What tells two packets of one flow with one IP id apart: TCP seq, ack and flags; UDP
    /// length.
    pub l4: (u32, u32, u8),
}

impl Record {
    /// `ip:port` (or `ip` without ports), as pktrace's JSON writes endpoints.
    #[must_use]
    pub fn src_ep(&self) -> String {
        endpoint(self.src, self.ports.map(|p| p.0))
    }

    #[must_use]
    pub fn dst_ep(&self) -> String {
        endpoint(self.dst, self.ports.map(|p| p.1))
    }
}

fn endpoint(ip: Ipv4Addr, port: Option<u16>) -> String {
    port.map_or_else(|| ip.to_string(), |p| format!("{ip}:{p}"))
}

/// `LINUX_SLL2` (pcap link type 276).
const LINKTYPE_LINUX_SLL2: u32 = 276;
const SLL2_LEN: usize = 20;
const PACKET_OUTGOING: u8 = 4;
const ETH_P_IP: u16 = 0x0800;

/// The IPv4 frames of a classic pcap file of link type `LINUX_SLL2` (native byte order, as
/// tcpdump writes it); other frames are skipped, a truncated tail ends the list.
///
/// # Errors
/// If the file is not such a pcap.
///
/// # Panics
/// Never: the header's length is checked before its fields are read.
pub fn parse_pcap(buf: &[u8]) -> Result<Vec<Record>, String> {
    if buf.len() < 24 {
        return Err(format!("{} bytes: no pcap header", buf.len()));
    }
    let magic = u32::from_ne_bytes(buf[0..4].try_into().expect("4"));
    let nanos = match magic {
        0xa1b2_c3d4 => false,
        0xa1b2_3c4d => true,
        _ => return Err(format!("pcap magic {magic:#x} (not native byte order?)")),
    };
    let linktype = u32::from_ne_bytes(buf[20..24].try_into().expect("4"));
    if linktype != LINKTYPE_LINUX_SLL2 {
        return Err(format!("link type {linktype}, not LINUX_SLL2 (276)"));
    }
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= buf.len() {
        let word = |o: usize| u32::from_ne_bytes(buf[at + o..at + o + 4].try_into().expect("4"));
        let (sec, frac, caplen) = (u64::from(word(0)), u64::from(word(4)), word(8) as usize);
        let Some(frame) = buf.get(at + 16..at + 16 + caplen) else {
            break;
        };
        let t_us = sec * 1_000_000 + if nanos { frac / 1000 } else { frac };
        if let Some(r) = parse_frame(t_us, frame) {
            out.push(r);
        }
        at += 16 + caplen;
    }
    Ok(out)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn parse_frame(t_us: u64, f: &[u8]) -> Option<Record> {
    if f.len() < SLL2_LEN + 20 || be16(f, 0) != ETH_P_IP {
        return None;
    }
    let (ifindex, outgoing) = (be32(f, 4), f[10] == PACKET_OUTGOING);
    let ip = &f[SLL2_LEN..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl {
        return None;
    }
    let proto = ip[9];
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let l4 = &ip[ihl..];
    let (ports, fp) = match proto {
        6 if l4.len() >= 14 => (
            Some((be16(l4, 0), be16(l4, 2))),
            (be32(l4, 4), be32(l4, 8), l4[13]),
        ),
        17 if l4.len() >= 8 => (
            Some((be16(l4, 0), be16(l4, 2))),
            (u32::from(be16(l4, 4)), 0, 0),
        ),
        _ => (None, (0, 0, 0)),
    };
    Some(Record {
        t_us,
        ifindex,
        outgoing,
        proto,
        src,
        dst,
        ports,
        ip_id: be16(ip, 4),
        l4: fp,
    })
}

/// The interfaces of namespace `ns`: index → name (`ip -o link`).
///
/// # Panics
/// If `ip` cannot be run.
#[must_use]
pub fn iface_names(ns: &str) -> HashMap<u32, String> {
    let out = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split(": ");
            let index = w.next()?.trim().parse().ok()?;
            let name = w.next()?.split('@').next()?.to_owned();
            Some((index, name))
        })
        .collect()
}

/// IPv4, not on `lo` (index 1 in every namespace): libpcap drops the outgoing copy of a
/// loopback frame after the kernel counted it, which would pass for a frame left unread.
const FILTER: &str = "ip and not ifindex 1";

/// How long tcpdump may take to start listening.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `tcpdump -p -i any` in a namespace; killed on drop if still running.
pub struct Capture {
    child: Option<Child>,
    dir: PathBuf,
}

impl Capture {
    /// Starts the capture in `ns` and waits until tcpdump listens.
    ///
    /// # Panics
    /// If tcpdump cannot start (run `cargo xtask setup`) or does not listen in time.
    #[must_use]
    pub fn start(ns: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pktrace-capture-{}-{n}", std::process::id()));
        fs::create_dir_all(&dir).expect("capture dir");
        let pcap = dir.join("all.pcap").display().to_string();
        // --immediate-mode: frames leave the kernel's ring at once, not when a block fills or
        // times out, so none is still in the ring when SIGINT ends the loop.
        let args = [
            "-p",
            "-i",
            "any",
            "-y",
            "LINUX_SLL2",
            "--immediate-mode",
            "-U",
            "-n",
            "-s",
            "128",
            "-w",
            &pcap,
            FILTER,
        ];
        let stderr = fs::File::create(dir.join("stderr")).expect("stderr file");
        let child = in_ns(ns, "tcpdump", args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting tcpdump (cargo xtask setup installs it): {e}"));
        let me = Self {
            child: Some(child),
            dir,
        };
        let start = Instant::now();
        while !me.stderr().contains("listening on") {
            assert!(
                start.elapsed() < LISTEN_TIMEOUT,
                "tcpdump does not listen:\n{}",
                me.stderr()
            );
            sleep(Duration::from_millis(20));
        }
        me
    }

    /// Waits until tcpdump has read every frame its filter passed (SIGUSR1 makes it print
    /// both counts): SIGINT ends its loop at once, and a frame still in the kernel's ring then
    /// is never written.
    fn catch_up(&self) {
        let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) else {
            return;
        };
        let start = Instant::now();
        while start.elapsed() < LISTEN_TIMEOUT {
            // SAFETY: plain kill(2) on our own child.
            unsafe { libc::kill(pid, libc::SIGUSR1) };
            sleep(Duration::from_millis(100));
            let (read, passed, _) = counts(&self.stderr());
            if read.is_some() && read == passed {
                return;
            }
        }
    }

    fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// Stops tcpdump (SIGINT) and returns every IPv4 frame it captured.
    ///
    /// # Panics
    /// If tcpdump does not stop, its file cannot be read, or frames were dropped or left unread.
    #[must_use]
    pub fn stop(self) -> Vec<Record> {
        self.stop_complete().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Stops tcpdump (SIGINT) and returns every IPv4 frame it captured.
    ///
    /// # Errors
    /// When the capture is no complete record of the node's traffic: tcpdump lost frames, or
    /// left frames its filter passed unread (seen once in a CI run: its counts stood still at
    /// 97 read of 109 passed for the whole catch-up).
    ///
    /// # Panics
    /// If tcpdump does not stop or its file cannot be read.
    pub fn stop_complete(mut self) -> Result<Vec<Record>, String> {
        self.catch_up();
        let mut child = self.child.take().expect("running");
        // SAFETY: plain kill(2) on our own child (`ip netns exec` execs tcpdump).
        unsafe { libc::kill(i32::try_from(child.id()).unwrap_or(0), libc::SIGINT) };
        let start = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if start.elapsed() > LISTEN_TIMEOUT {
                let _ = child.kill();
                panic!("tcpdump did not stop:\n{}", self.stderr());
            }
            sleep(Duration::from_millis(20));
        }
        let stderr = self.stderr();
        let (read, passed, dropped) = counts(&stderr);
        if dropped != Some(0) {
            return Err(format!("tcpdump lost frames:\n{stderr}"));
        }
        if read != passed {
            let last = stderr.lines().last().unwrap_or_default();
            return Err(format!("tcpdump left frames unread: {last}"));
        }
        let buf = fs::read(self.dir.join("all.pcap")).expect("reading the capture");
        Ok(parse_pcap(&buf).unwrap_or_else(|e| panic!("the capture: {e}\n{stderr}")))
    }
}

/// The latest (captured, received by filter, dropped by kernel) counts tcpdump printed, on
/// exit (one line each) or on SIGUSR1 (one line, comma-separated).
fn counts(stderr: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let mut out = (None, None, None);
    for part in stderr.lines().flat_map(|l| l.split(',')) {
        let part = part.trim().trim_start_matches("tcpdump: ");
        let Some((n, what)) = part.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse() else { continue };
        match what {
            "packets captured" => out.0 = Some(n),
            "packets received by filter" => out.1 = Some(n),
            "packets dropped by kernel" => out.2 = Some(n),
            _ => {}
        }
    }
    out
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[expect(
        clippy::cast_possible_truncation,
        reason = "a test frame's length, far below 2^32"
    )]
    fn pcap(frames: &[(u32, u8, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        // magic, version (two u16 the reader skips), zone, sigfigs, snaplen, link type.
        for w in [
            0xa1b2_c3d4u32,
            0x0004_0002,
            0,
            0,
            65535,
            LINKTYPE_LINUX_SLL2,
        ] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        for (i, (ifindex, pkttype, ip)) in frames.iter().enumerate() {
            let mut f = Vec::new();
            f.extend_from_slice(&ETH_P_IP.to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            f.extend_from_slice(&ifindex.to_be_bytes());
            f.extend_from_slice(&1u16.to_be_bytes());
            f.extend_from_slice(&[*pkttype, 6, 0, 0, 0, 0, 0, 0, 0, 0]);
            f.extend_from_slice(ip);
            for w in [
                7u32,
                u32::try_from(i).unwrap(),
                f.len() as u32,
                f.len() as u32,
            ] {
                b.extend_from_slice(&w.to_ne_bytes());
            }
            b.extend_from_slice(&f);
        }
        b
    }

    #[expect(
        clippy::cast_possible_truncation,
        reason = "splits the 16-bit IP id into its two bytes"
    )]
    fn tcp_syn(id: u16) -> Vec<u8> {
        let mut ip = vec![
            0x45,
            0,
            0,
            40,
            (id >> 8) as u8,
            id as u8,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ];
        ip.extend_from_slice(&[10, 13, 76, 46, 10, 0, 159, 58]);
        ip.extend_from_slice(&[
            0xa0, 0x12, 0, 80, 0, 0, 0, 9, 0, 0, 0, 0, 0x50, 0x02, 0, 0, 0, 0, 0, 0,
        ]);
        ip
    }

    #[test]
    fn frames_carry_interface_direction_tuple_and_id() {
        let got = parse_pcap(&pcap(&[
            (5, 0, tcp_syn(0xbeef)),
            (3, PACKET_OUTGOING, tcp_syn(0xbeef)),
        ]))
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].ifindex, got[0].outgoing, got[1].outgoing),
            (5, false, true)
        );
        assert_eq!(
            (got[0].src_ep().as_str(), got[0].dst_ep().as_str()),
            ("10.13.76.46:40978", "10.0.159.58:80")
        );
        assert_eq!(
            (got[0].ip_id, got[0].proto, got[0].l4),
            (0xbeef, 6, (9, 0, 0x02))
        );
        assert_eq!(got[1].t_us, 7_000_001);
    }

    #[test]
    fn counts_are_read_from_exit_and_sigusr1_lines() {
        let exit = "tcpdump: listening on any\n75 packets captured\n99 packets received by filter\n0 packets dropped by kernel\n";
        assert_eq!(counts(exit), (Some(75), Some(99), Some(0)));
        let usr1 = format!(
            "{exit}tcpdump: 99 packets captured, 99 packets received by filter, 0 packets dropped by kernel\n"
        );
        assert_eq!(counts(&usr1), (Some(99), Some(99), Some(0)));
        assert_eq!(counts(""), (None, None, None));
    }

    #[test]
    fn other_link_types_and_truncated_files_are_refused_or_cut() {
        let mut b = pcap(&[(5, 0, tcp_syn(1))]);
        assert_eq!(parse_pcap(&b[..b.len() - 1]).unwrap(), vec![]);
        b[20..24].copy_from_slice(&1u32.to_ne_bytes());
        assert!(parse_pcap(&b).is_err());
        assert!(parse_pcap(&[0; 10]).is_err());
    }
}
