//! The lab's servers (`xtask lab serve`): a TCP server and/or a UDP responder that answer
//! every client with the address they saw (`client=<ip>:<port>`), like an nginx access log
//! oracle, and append one line per client to a log.

use std::{
    fs::{self, File, OpenOptions},
    io::{Read as _, Write as _},
    net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket},
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

/// Connections handled at once; beyond this, replies go out without draining the request.
const MAX_CONNECTION_THREADS: usize = 64;
/// Socket time-out for every read and write.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The most request bytes drained per connection.
const MAX_DRAIN: u64 = 64 * 1024;

type Log = Arc<Mutex<File>>;

/// Serves TCP on `tcp` and/or UDP on `udp` (every address of `bind`'s family: `0.0.0.0` or
/// `::`) until killed, logging clients to `log`; creates `ready_file` once the sockets are
/// bound.
///
/// # Errors
/// If neither port is given, `log` cannot be opened, or a socket cannot be bound.
pub fn serve(
    tcp: Option<u16>,
    udp: Option<u16>,
    bind: IpAddr,
    log: &Path,
    ready_file: Option<&Path>,
) -> Result<()> {
    if tcp.is_none() && udp.is_none() {
        bail!("nothing to serve: give --tcp PORT and/or --udp PORT");
    }
    let file = OpenOptions::new().create(true).append(true).open(log);
    let log: Log = Arc::new(Mutex::new(
        file.with_context(|| format!("opening {}", log.display()))?,
    ));
    let listener = tcp.map(|port| TcpListener::bind((bind, port))).transpose();
    let listener = listener.context("binding the TCP port")?;
    let socket = udp.map(|port| UdpSocket::bind((bind, port))).transpose();
    let socket = socket.context("binding the UDP port")?;
    if let Some(ready) = ready_file {
        fs::write(ready, b"").with_context(|| format!("creating {}", ready.display()))?;
    }
    let udp_thread = socket.map(|socket| {
        let log = Arc::clone(&log);
        thread::spawn(move || serve_udp(&socket, &log))
    });
    if let Some(listener) = listener {
        serve_tcp(&listener, &log);
    }
    if let Some(handle) = udp_thread {
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("the UDP thread panicked"))??;
    }
    Ok(())
}

fn serve_tcp(listener: &TcpListener, log: &Log) {
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // E.g. out of descriptors: back off instead of spinning.
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTION_THREADS {
            busy.fetch_sub(1, Ordering::SeqCst);
            let _ = answer_tcp(stream, log, false);
            continue;
        }
        let (log, busy) = (Arc::clone(log), Arc::clone(&busy));
        thread::spawn(move || {
            let _ = answer_tcp(stream, &log, true);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Logs, replies `client=<peer>`, then (if `drain`) reads the client's request until it
/// closes so that closing never turns into a reset that could eat the reply.
fn answer_tcp(mut stream: TcpStream, log: &Log, drain: bool) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let (peer, local) = (stream.peer_addr()?, stream.local_addr()?);
    // Log first: whoever got the reply can rely on the log line being there.
    write_log(log, &format!("tcp client={peer} local={local}"));
    stream.write_all(format!("client={peer}\n").as_bytes())?;
    stream.shutdown(Shutdown::Write)?;
    if drain {
        let _ = std::io::copy(&mut (&stream).take(MAX_DRAIN), &mut std::io::sink());
    }
    Ok(())
}

fn serve_udp(socket: &UdpSocket, log: &Log) -> Result<()> {
    let mut buf = [0u8; 2048];
    loop {
        let Ok((_, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        write_log(log, &format!("udp client={peer}"));
        let _ = socket.send_to(format!("client={peer}\n").as_bytes(), peer);
    }
}

fn write_log(log: &Log, line: &str) {
    if let Ok(mut file) = log.lock() {
        let _ = writeln!(file, "{line}").and_then(|()| file.flush());
    }
}

/// Parses `client=<ip>:<port>` (a server's reply) into the address the server saw.
#[must_use]
pub fn parse_reply(reply: &str) -> Option<SocketAddr> {
    reply.trim().strip_prefix("client=")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_back() {
        assert_eq!(
            parse_reply("client=10.13.76.4:4242\n"),
            Some("10.13.76.4:4242".parse().unwrap())
        );
        assert_eq!(parse_reply("hello"), None);
    }

    #[test]
    fn serves_tcp_and_udp_on_loopback() {
        let dir = std::env::temp_dir().join(format!("xtask-serve-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (log, ready) = (dir.join("log"), dir.join("ready"));
        let (tcp_port, udp_port) = (free_tcp_port(), free_udp_port());
        let (log2, ready2) = (log.clone(), ready.clone());
        thread::spawn(move || {
            serve(
                Some(tcp_port),
                Some(udp_port),
                std::net::Ipv4Addr::UNSPECIFIED.into(),
                &log2,
                Some(&ready2),
            )
        });
        for _ in 0..200 {
            if ready.exists() {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let timeout = Duration::from_secs(2);
        let tcp = crate::client::tcp(([127, 0, 0, 1], tcp_port).into(), timeout).unwrap();
        let udp = crate::client::udp(([127, 0, 0, 1], udp_port).into(), timeout).unwrap();
        assert!(
            parse_reply(&tcp).is_some_and(|a| a.ip().is_loopback()),
            "{tcp}"
        );
        assert!(
            parse_reply(&udp).is_some_and(|a| a.ip().is_loopback()),
            "{udp}"
        );
        let logged = fs::read_to_string(&log).unwrap();
        assert!(logged.contains("tcp client=127.0.0.1:"), "{logged}");
        assert!(
            logged.contains(&format!("local=127.0.0.1:{tcp_port}")),
            "{logged}"
        );
        assert!(logged.contains("udp client=127.0.0.1:"), "{logged}");
        let _ = fs::remove_dir_all(&dir);
    }

    fn free_tcp_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn free_udp_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}
