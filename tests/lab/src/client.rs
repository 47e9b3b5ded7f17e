//! The lab's client (`xtask lab client`): one TCP connection or one UDP datagram to a lab
//! server, returning the server's reply line (`client=<ip>:<port>`, the address it saw).

use std::{
    fmt::Display,
    io::Read as _,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use xtask_common::{cmd::output, xtask_exe};

use super::netns::in_ns;

/// Default time-out of a lab client request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// The most reply bytes read.
const MAX_REPLY: u64 = 4096;

/// Connects to `addr` from the current namespace and returns the server's first line.
///
/// # Errors
/// If the connection or the read fails, or times out.
pub fn tcp(addr: SocketAddr, timeout: Duration) -> Result<String> {
    tcp_holding(addr, timeout, Duration::ZERO)
}

/// [`tcp`], keeping the connection open for `hold` after the server's reply and close before
/// closing it: the connection's last packets (the client's FIN and its answer) come `hold`
/// after its first.
///
/// # Errors
/// As [`tcp`].
pub fn tcp_holding(addr: SocketAddr, timeout: Duration, hold: Duration) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut reply = String::new();
    (&mut stream)
        .take(MAX_REPLY)
        .read_to_string(&mut reply)
        .with_context(|| format!("reading the reply of {addr}"))?;
    std::thread::sleep(hold);
    drop(stream);
    first_line(&reply, addr)
}

/// Sends one datagram to `addr` from the current namespace and returns the reply's first line.
///
/// # Errors
/// If the socket cannot be bound or used, or no reply comes within `timeout`.
pub fn udp(addr: SocketAddr, timeout: Duration) -> Result<String> {
    let any: SocketAddr = if addr.is_ipv6() {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(any).context("binding a UDP socket")?;
    socket
        .connect(addr)
        .with_context(|| format!("connecting to {addr}"))?;
    socket.set_read_timeout(Some(timeout))?;
    socket
        .send(b"pktrace-lab\n")
        .with_context(|| format!("sending to {addr}"))?;
    let mut buf = [0u8; 2048];
    let len = socket
        .recv(&mut buf)
        .with_context(|| format!("no reply from {addr} (udp)"))?;
    first_line(&String::from_utf8_lossy(&buf[..len]), addr)
}

fn first_line(reply: &str, addr: SocketAddr) -> Result<String> {
    match reply.lines().next() {
        Some(line) if !line.is_empty() => Ok(line.to_owned()),
        _ => bail!("{addr} closed without a reply"),
    }
}

/// Runs `xtask lab client --tcp addr` inside namespace `from_ns` and returns the reply line
/// (`client=<ip>:<port>`).
///
/// # Errors
/// If the client cannot be run in `from_ns`, or it fails.
pub fn client_tcp(from_ns: &str, addr: impl Display) -> Result<String> {
    client_in(from_ns, &["--tcp", &addr.to_string()])
}

/// [`client_tcp`], the connection held open for `hold` after the reply ([`tcp_holding`]).
///
/// # Errors
/// As [`client_tcp`].
pub fn client_tcp_holding(from_ns: &str, addr: impl Display, hold: Duration) -> Result<String> {
    let hold_ms = hold.as_millis().to_string();
    client_in(
        from_ns,
        &["--tcp", &addr.to_string(), "--hold-ms", &hold_ms],
    )
}

/// Runs `xtask lab client --udp addr` inside namespace `from_ns` and returns the reply line.
///
/// # Errors
/// If the client cannot be run in `from_ns`, or it fails.
pub fn client_udp(from_ns: &str, addr: impl Display) -> Result<String> {
    client_in(from_ns, &["--udp", &addr.to_string()])
}

fn client_in(ns: &str, args: &[&str]) -> Result<String> {
    let exe = xtask_exe()?;
    let full = [&["lab", "client"][..], args].concat();
    let out = output(&mut in_ns(ns, exe, full))
        .with_context(|| format!("request {} from {ns}", args.join(" ")))?;
    Ok(out.trim().to_owned())
}
