//! The words of `--help` and the man page that are not one option's: examples, what the
//! words mean, exit status, environment, files. Written as they are shown: at most 80 columns,
//! not reflowed (the man page sets them in no-fill mode).

/// After the options in `-h` (the summary).
pub const SHORT_AFTER: &str = "\
Examples:
  pktrace --pod ubuntu                10 s of the pod's packets, then a summary
  pktrace --pod ubuntu --failures -f  its drops and unanswered connections
  pktrace --pod ubuntu udp port 53    only its DNS packets (tcpdump syntax)

--help says more: what the words mean, more examples, exit status, environment.";

/// How long a run lasts.
pub const HOW_LONG: &str = "\
without -f, -c or -d   traces for 10 s, prints the summary and exits
-f, --follow           streams until Ctrl-C or SIGTERM (or -c or -d)
-c N, -d DURATION      stops after N journeys or after DURATION,
                       whichever comes first
The summary is printed last in every case.";

/// What the words of the output mean.
pub const WORDS: &str = "\
journey    one packet's way through this node: its steps, from the
           first hook that saw it to where it left the node, was
           dropped or was last seen
step       one place on that way: a tc hook on an interface (ingress,
           egress) or a NAT change: DNAT, SNAT, and un-DNAT, un-SNAT
           when a reply is translated back (JSON: \"point\")
hook       where pktrace's kernel programs attach: tc on the
           interfaces (-i) and the NAT hook (--nat-hook)
drop       the kernel freed the packet: shown with its reason and
           where it happened
no answer  a connection whose first packet left the node and got no
           reply within 3 s
failure    a drop or a connection with no answer: what --failures
           shows; the summary counts both, and refusals (a TCP reset
           or an ICMP error in reply)
a > b      source > destination, as in tcpdump
x → y      what NAT changed x into; = where it left x alone";

/// Examples for `--help` and the man page.
pub const EXAMPLES: &str = "\
pktrace --pod ubuntu                10 s of the pod's packets (namespace
                                    default), then a summary
pktrace --pod ubuntu --failures -f  its drops and unanswered
                                    connections, until Ctrl-C
pktrace --pod web-0 -n shop -f -o json
                                    stream JSON lines until Ctrl-C
pktrace --pod ubuntu udp port 53    only the pod's DNS packets
pktrace --pod ubuntu -o line        one line per journey
pktrace --pod-ip 10.13.76.46 -c 20  the first 20 journeys of that
                                    address
pktrace --svc whereami -f           every packet of service whereami
pktrace --pod ubuntu -w out.pcapng  also the frames, for Wireshark
pktrace --trace-all -d 2s           every IP packet on the hooks, 2 s
pktrace merge a=a.jsonl b=b.jsonl   journeys across nodes from each
                                    node's -o json";

/// Exit status.
pub const EXIT_STATUS: &str = "\
0  done
1  runtime error (e.g. not root, a hook the kernel refuses)
2  usage error (e.g. an unknown option or pod, a bad expression)";

/// Environment variables pktrace reads.
pub const ENVIRONMENT: &str = "\
PKTRACE_CRICTL  the crictl to run when looking up --pod (default:
                crictl in PATH)
KUBECONFIG      kubeconfig for the Kubernetes API, after --kubeconfig
COLUMNS         the width of -o line and of messages on a terminal
NO_COLOR        set: no colours with --color auto";

/// Files pktrace reads.
pub const FILES: &str = "\
/var/run/azure-vnet.json      Azure CNI state file, where --pod is
                              looked up first (--state-file)
/var/lib/kubelet/kubeconfig   the kubelet's kubeconfigs, for the
/etc/kubernetes/kubelet.conf  Kubernetes API when neither
                              --kubeconfig nor KUBECONFIG is given;
                              then ~/.kube/config
/sys/kernel/btf/vmlinux       the kernel's BTF";

/// Who may run it.
pub const PRIVILEGES: &str = "\
pktrace needs root (or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON).";

/// Where to read on.
pub const SEE_ALSO: &str = "\
pktrace-merge(1), kubectl pktrace --help (the kubectl plugin),
tcpdump(8), pcap-filter(7)";

/// The widest line of a section body: the man page indents it by 7 columns, `--help` by 2.
pub const BODY_WIDTH: usize = 73;

/// After the options of `pktrace merge --help`.
pub const MERGE: &str = "\
Record on each node with pktrace ... -o json > NODE.jsonl (trace the same
addresses on every node, e.g. --pod-ip with both pods' IPs), then merge.
A journey leaving a node on an uplink (last step egress on eth0) is joined to
the journey entering another node on its uplink with the same packet
(protocol, src, dst, IP id). Clocks are aligned from the packets crossing both
ways (NTP-style); wall clocks are not used.

Output: one JSON line per journey, steps with a `node` field, `t_ns` on the
aligned clock, `wire_ns` on the first step of each later node; a
{\"type\":\"merge\",...} line last.";

/// The sections of the long help and the man page after the options: (title, body).
pub const SECTIONS: [(&str, &str); 7] = [
    ("How long it runs", HOW_LONG),
    ("Words", WORDS),
    ("Examples", EXAMPLES),
    ("Exit status", EXIT_STATUS),
    ("Environment", ENVIRONMENT),
    ("Files", FILES),
    ("Privileges", PRIVILEGES),
];

/// After the options in `--help`: [`SECTIONS`], each body indented by two spaces.
#[must_use]
pub fn long_after() -> String {
    let mut out = String::new();
    for (title, body) in SECTIONS {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(title);
        out.push_str(":\n");
        for line in body.lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_fit_80_columns_as_written() {
        let mut texts = vec![(SHORT_AFTER, 80), (MERGE, 80), (SEE_ALSO, BODY_WIDTH)];
        texts.extend(SECTIONS.iter().map(|(_, body)| (*body, BODY_WIDTH)));
        for (text, width) in texts {
            for line in text.lines() {
                assert!(line.chars().count() <= width, "{line}");
            }
        }
    }
}
