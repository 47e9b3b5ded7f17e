//! Hostile and broken state files (issue 6): too large, endless, corrupt in every way serde
//! can see, missing or unreadable, and pod names made to attack the terminal. Each gives one
//! clear line that says what to do, with every name from the file escaped.

use std::{
    fs::{self, File},
    io::{BufWriter, Write as _},
    path::PathBuf,
};

use super::*;
use crate::{
    output::{Sink as _, test_support::Shared, text::TextSink},
    summary::Summary,
    util::safe,
};

/// A fresh file in the temp dir, removed on drop.
struct Temp(tempfile::TempPath);

impl Temp {
    fn new(tag: &str) -> Self {
        let file = tempfile::Builder::new()
            .prefix(&format!("pktrace-hostile-{tag}-"))
            .tempfile()
            .unwrap();
        Self(file.into_temp_path())
    }

    fn with(tag: &str, content: &[u8]) -> Self {
        let t = Self::new(tag);
        fs::write(&t.0, content).unwrap();
        t
    }
}

/// Nothing in `msg` a terminal would act on, and one line.
fn assert_printable(msg: &str) {
    let bad = msg.chars().find(|&c| {
        c.is_control()
            || matches!(c, '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}' | '\u{feff}')
    });
    assert_eq!(bad, None, "{msg:?}");
}

/// A file-level error: one printable line with a way out, and exit code 1 (not 2).
#[expect(
    clippy::needless_pass_by_value,
    reason = "test helper: takes the error the call under test returned"
)]
fn assert_node_error(err: StateFileError, want: &str) {
    let msg = err.to_string();
    assert!(msg.contains(want), "{msg}");
    assert!(msg.contains("--pod-ip IP"), "{msg}");
    assert_printable(&msg);
    assert!(!err.is_usage(), "{msg}");
}

#[test]
fn refuses_a_200_mb_state_file_without_parsing_it() {
    // Valid-looking JSON: the real shape, 200 MB of endpoints.
    let big = Temp::new("200mb");
    let mut w = BufWriter::new(File::create(&big.0).unwrap());
    w.write_all(br#"{"Network":{"ExternalInterfaces":{"eth0":{"Networks":{"azure":{"Endpoints":{"#)
        .unwrap();
    let endpoint = r#""0123456789abcdef":{"PODName":"whereami-564765b89-qfq2k","PODNameSpace":"default","IPAddresses":[{"IP":"10.13.76.26","Mask":"////AA=="}],"HostIfName":"azva4124965a9b"},"#;
    let chunk = endpoint.repeat(1 << 12);
    for _ in 0..=((200 << 20) / chunk.len()) {
        w.write_all(chunk.as_bytes()).unwrap();
    }
    w.write_all(br#""last":{}}}}}}}}"#).unwrap();
    w.flush().unwrap();
    drop(w);
    let size = fs::metadata(&big.0).unwrap().len();
    assert!(size > 200 << 20);
    let err = resolve_pod(&big.0, "default", "ubuntu").unwrap_err();
    assert!(
        matches!(err, StateFileError::TooLarge { size: s, .. } if s == size),
        "{err}"
    );
    assert!(err.to_string().contains("the limit is 64 MiB"), "{err}");
    assert_node_error(err, "is too large (");
}

#[test]
fn refuses_without_reading_what_its_size_says_is_too_large() {
    // 8 GiB of hole: reading it would take minutes and 8 GiB of memory.
    let sparse = Temp::new("sparse");
    File::create(&sparse.0).unwrap().set_len(8 << 30).unwrap();
    let err = resolve_pod(&sparse.0, "default", "ubuntu").unwrap_err();
    assert!(
        matches!(err, StateFileError::TooLarge { size, .. } if size == 8 << 30),
        "{err}"
    );
    assert_eq!(cni_layout(&sparse.0), None);
}

#[test]
fn stops_reading_a_file_that_never_ends() {
    // A device (or a file growing while read) has no useful size: stop one byte past the limit.
    let err = read(Path::new("/dev/zero"), 1000).unwrap_err();
    assert!(
        matches!(
            err,
            StateFileError::TooLarge {
                size: 1001,
                limit: 1000,
                ..
            }
        ),
        "{err}"
    );
    let err = resolve_pod(Path::new("/dev/zero"), "default", "ubuntu").unwrap_err();
    assert!(matches!(err, StateFileError::TooLarge { size, .. } if size == MAX_STATE_FILE + 1));
    assert_node_error(err, "too large");
}

#[test]
fn the_limit_is_inclusive() {
    let exact = Temp::with("exact", &[b' '; 100]);
    assert_eq!(read(&exact.0, 100).unwrap().len(), 100);
    let over = Temp::with("over", &[b' '; 101]);
    assert!(matches!(
        read(&over.0, 100),
        Err(StateFileError::TooLarge { size: 101, .. })
    ));
    let empty = Temp::with("empty", b"");
    assert!(read(&empty.0, 100).unwrap().is_empty());
}

#[test]
fn corrupt_state_files() {
    const FIXTURE: &[u8] = include_bytes!("../../../tests-data/azure-vnet.json");
    let nested = "[".repeat(100_000);
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        ("binary".into(), (0..=255u8).cycle().take(4096).collect()),
        ("NULs".into(), vec![0; 64]),
        ("byte order mark".into(), [b"\xef\xbb\xbf".as_slice(), FIXTURE].concat()),
        ("nested 100000 deep".into(), nested.into_bytes()),
        ("invalid UTF-8 in a name".into(), b"{\"Network\":{\"ExternalInterfaces\":{\"e\xff\":{}}}}".to_vec()),
        ("endpoints as a list".into(), br#"{"Network":{"ExternalInterfaces":{"eth0":{"Networks":{"azure":{"Endpoints":[]}}}}}}"#.to_vec()),
        ("escape sequence in a value of the wrong type".into(), b"{\"Network\":\"evil\\u001b[2J\\u202e\\n\"}".to_vec()),
        ("raw escape sequence in a key".into(), b"{\"Network\":{\"\x1b[2J\": 1,".to_vec()),
        ("number too large".into(), b"{\"Network\":{\"ExternalInterfaces\":1e999999}}".to_vec()),
    ];
    for cut in [1, 100, FIXTURE.len() / 2, FIXTURE.len() - 1] {
        cases.push((format!("fixture cut at {cut}"), FIXTURE[..cut].to_vec()));
    }
    for (name, bytes) in cases {
        let file = Temp::with("corrupt", &bytes);
        let err = resolve_pod(&file.0, "default", "ubuntu").unwrap_err();
        assert!(
            matches!(err, StateFileError::Corrupt { .. }),
            "{name}: {err}"
        );
        assert_node_error(err, "is corrupt at line");
        assert_eq!(cni_layout(&file.0), None, "{name}");
    }
}

#[test]
fn missing_and_unreadable_state_files() {
    let missing = std::env::temp_dir().join("pktrace-hostile-no-such-dir/azure-vnet.json");
    let err = resolve_pod(&missing, "default", "ubuntu").unwrap_err();
    assert!(matches!(err, StateFileError::Missing { .. }), "{err}");
    assert_node_error(err, "no Azure CNI state file at");
    // A directory, and a path through a regular file (root reads any file, so permissions
    // cannot make one unreadable in a test run as root).
    for path in [
        std::env::temp_dir(),
        PathBuf::from("/etc/hostname/azure-vnet.json"),
    ] {
        let err = resolve_pod(&path, "default", "ubuntu").unwrap_err();
        assert!(
            matches!(err, StateFileError::Unreadable { .. }),
            "{}: {err}",
            path.display()
        );
        assert_node_error(err, "cannot read the Azure CNI state file");
    }
}

/// Names a hostile or broken CNI could write: terminal escapes (CSI, OSC with BEL, 8-bit
/// CSI), line breaks, bidi overrides and isolates, zero-width and letter marks.
const HOSTILE: [&str; 8] = [
    "evil\u{1b}[2J\u{1b}[1;31m",
    "title\u{1b}]0;pwned\u{7}",
    "line\nbreak",
    "carriage\rreturn",
    "csi\u{9b}31m",
    "rtl\u{202e}exe.txt",
    "iso\u{2066}late\u{2069}",
    "marks\u{61c}\u{200f}\u{200b}",
];

fn hostile_state_file() -> Temp {
    let mut endpoints = Vec::new();
    for (i, name) in HOSTILE.iter().enumerate() {
        let ns = if i % 2 == 0 {
            "default"
        } else {
            "name\nspace\u{1b}[K"
        };
        let ip = if i == 0 {
            String::new()
        } else {
            format!(r#"{{"IP":"10.13.76.{i}"}}"#)
        };
        endpoints.push(format!(
            r#""ep{i}":{{"PODName":{},"PODNameSpace":{},"IPAddresses":[{ip}]}}"#,
            serde_json::to_string(name).unwrap(),
            serde_json::to_string(ns).unwrap()
        ));
    }
    let json = format!(
        r#"{{"Network":{{"ExternalInterfaces":{{"eth0":{{"Networks":{{"azure":{{"Endpoints":{{{}}}}}}}}}}}}}}}"#,
        endpoints.join(",")
    );
    Temp::with("names", json.as_bytes())
}

#[test]
fn hostile_names_are_escaped_in_every_message() {
    let file = hostile_state_file();
    let pods = list_pods(&file.0).unwrap();
    assert_eq!(
        pods.len(),
        HOSTILE.len(),
        "names are data: kept, matched exactly"
    );
    for pod in &pods {
        let found = resolve_pod(&file.0, &pod.namespace, &pod.name);
        match found {
            Ok(p) => assert_eq!(&p, pod),
            Err(e) => {
                assert!(matches!(e, StateFileError::NoAddress { .. }), "{e}");
                assert_printable(&e.to_string());
            }
        }
        // A typo lists the hostile names (did you mean, pods here), another namespace names
        // the one that has it.
        let typo = format!("{}x", pod.name);
        for (ns, name) in [
            (pod.namespace.as_str(), typo.as_str()),
            ("elsewhere", pod.name.as_str()),
        ] {
            let err = resolve_pod(&file.0, ns, name).unwrap_err();
            assert!(err.is_usage());
            assert_printable(&err.to_string());
        }
    }
    let err = resolve_pod(&file.0, "default", "evil")
        .unwrap_err()
        .to_string();
    assert!(err.contains("evil\\u{1b}[2J\\u{1b}[1;31m"), "{err}");
    assert!(err.contains("line\\nbreak"), "{err}");
}

#[test]
fn hostile_labels_are_escaped_where_printed() {
    let file = hostile_state_file();
    for pod in list_pods(&file.0).unwrap() {
        // The start-up line prints `safe(label)`; the text summary escapes it itself.
        assert_printable(&safe(&pod.label()));
        let out = Shared::default();
        let mut sink = TextSink::new(Box::new(out.clone()), false, pod.label());
        sink.summary(&Summary::new()).unwrap();
        let text = out.text();
        let title = text.lines().next().unwrap();
        assert!(title.starts_with("summary for "), "{text:?}");
        assert_printable(title);
        assert!(text.lines().all(|l| !l.contains('\u{1b}')), "{text:?}");
    }
}
