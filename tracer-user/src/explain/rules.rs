//! The nat table as `iptables-save -t nat` (or `iptables -t nat -S`) prints it, parsed into
//! chains of rules. Parsing never fails: matches pktrace does not model are kept as
//! [`Test::Unknown`] with their tokens, lines it cannot read are counted and skipped.

use std::{collections::HashMap, net::IpAddr, sync::OnceLock};

use super::ipset::{IpSets, SetMatch};

/// Chains the kernel calls; the rest are reached by jumps.
pub const BUILTIN: [&str; 4] = ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"];

/// A netfilter hook the nat table sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    Prerouting,
    Input,
    Output,
    Postrouting,
}

impl Hook {
    /// The iptables built-in chain and its nat priority (`NF_IP_PRI_NAT_DST`/`_SRC`).
    #[must_use]
    pub const fn builtin(self) -> (i32, &'static str) {
        match self {
            Self::Prerouting => (-100, "PREROUTING"),
            Self::Input => (100, "INPUT"),
            Self::Output => (-100, "OUTPUT"),
            Self::Postrouting => (100, "POSTROUTING"),
        }
    }
}

/// A base chain: where the kernel enters the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Base {
    pub hook: Hook,
    pub priority: i32,
    pub chain: String,
}

/// One nat table: iptables' (legacy or nft backend) or a native nftables table.
#[derive(Clone, Debug, Default)]
pub struct NatRules {
    /// Where the rules come from, for messages (`iptables-nft`, `nft table ip kube-proxy`).
    pub label: String,
    /// Base chains; empty means iptables' built-in ones.
    pub bases: Vec<Base>,
    chains: Vec<Chain>,
    by_name: HashMap<String, usize>,
    /// nftables named sets: elements, each a concatenation of values.
    pub nft_sets: HashMap<String, Vec<Vec<Val>>>,
    /// nftables named verdict maps.
    pub nft_maps: HashMap<String, Vec<(Vec<Val>, Target)>>,
    /// The node's ipsets, for `-m set` (empty when none were read).
    pub ipsets: IpSets,
    /// Built on first use: what decisions look up instead of scanning every rule.
    index: Lazy,
    /// Lines that were neither comments, chain declarations nor rules of the nat table.
    pub skipped_lines: usize,
}

/// Lookups over the whole table, built once per table.
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// DNAT rules (chain index, rule index) by their one target address.
    pub dnat_by_ip: HashMap<IpAddr, Vec<(usize, usize)>>,
    /// DNAT rules to an address range.
    pub dnat_ranged: Vec<(usize, usize)>,
    /// For each chain name, the indexes of the chains that jump or go to it.
    pub parents: HashMap<String, Vec<usize>>,
}

/// The index, left out of `Debug` (fingerprints compare rules, not caches).
#[derive(Clone, Default)]
struct Lazy(OnceLock<Index>);

impl std::fmt::Debug for Lazy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lazy")
    }
}

/// A chain and its rules, in order.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    pub name: String,
    pub rules: Vec<Rule>,
}

/// One `-A` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Conditions, all of which must hold.
    pub conds: Vec<Cond>,
    pub target: Target,
    /// `-m comment --comment "…"`.
    pub comment: Option<String>,
}

/// A condition, possibly negated with `!`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    pub negated: bool,
    pub test: Test,
}

/// What a condition tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    Src(Cidr),
    Dst(Cidr),
    /// `-p`: protocol number, 0 for `all`.
    Proto(u8),
    InIface(String),
    OutIface(String),
    /// `--dport`/`--dports`: inclusive ranges.
    Dport(Vec<(u16, u16)>),
    Sport(Vec<(u16, u16)>),
    /// `-m mark --mark value/mask`.
    Mark {
        value: u32,
        mask: u32,
    },
    /// `-m addrtype --dst-type`/`--src-type` (`LOCAL`, `UNICAST`, …).
    AddrType {
        dst: bool,
        kind: String,
    },
    /// `-m iprange --src-range`/`--dst-range`.
    Range {
        dst: bool,
        lo: IpAddr,
        hi: IpAddr,
    },
    /// `-m statistic …`: random or nth, unknowable per packet.
    Statistic,
    /// `-m set --match-set NAME src|dst|…`.
    Set(SetMatch),
    /// nftables: the packet's `keys` (concatenated) are in a set, named or inline.
    InSet {
        keys: Vec<Key>,
        set: SetRef,
    },
    /// nftables `ct mark & mask == value`: pktrace sees new connections, whose mark is 0.
    CtMark {
        value: u32,
        mask: u32,
    },
    /// Anything else, as written (module and tokens).
    Unknown(String),
}

/// What a rule does when it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `-j CHAIN` (or an extension pktrace does not know: see [`NatRules::chain`]).
    Jump(String),
    /// `-g CHAIN`.
    Goto(String),
    Return,
    /// `-j DNAT --to-destination …`.
    Dnat(Option<NatTo>),
    /// `-j SNAT --to-source …`.
    Snat(Option<NatTo>),
    Masquerade,
    /// `-j MARK`: new mark = (mark & !`clear`) ^ `xor`.
    Mark {
        clear: u32,
        xor: u32,
    },
    /// Ends the table for this packet without NAT pktrace models (`ACCEPT`, `DROP`,
    /// `REDIRECT`, `NETMAP`, …).
    Stop(String),
    /// No `-j`: counts and goes on.
    None,
    /// nftables verdict map: the verdict of the element the packet's keys select.
    Vmap {
        keys: MapKey,
        map: MapRef,
    },
}

/// A packet field nftables rules look up (`ip daddr . meta l4proto . th dport`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Saddr,
    Daddr,
    L4proto,
    Sport,
    Dport,
    Mark,
    Iifname,
    Oifname,
    /// A field pktrace does not model, as nft names it.
    Other(String),
}

/// One value of a set element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Net(Cidr),
    Range(IpAddr, IpAddr),
    /// Numbers (ports, protocols, marks) as an inclusive range.
    Num(u64, u64),
    /// Interface names; a trailing `*` is a wildcard.
    Str(String),
}

/// A set a rule tests: by name (in [`NatRules::nft_sets`]) or written in the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetRef {
    Named(String),
    Inline(Vec<Vec<Val>>),
}

/// What a verdict map is keyed by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapKey {
    Fields(Vec<Key>),
    /// `numgen random mod N`: random like `statistic`.
    Random,
}

/// A verdict map: by name (in [`NatRules::nft_maps`]) or written in the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapRef {
    Named(String),
    Inline(Vec<(Vec<Val>, Target)>),
}

impl Target {
    /// The name as iptables writes it.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Self::Jump(c) | Self::Goto(c) | Self::Stop(c) => c,
            Self::Return => "RETURN",
            Self::Dnat(_) => "DNAT",
            Self::Snat(_) => "SNAT",
            Self::Masquerade => "MASQUERADE",
            Self::Mark { .. } => "MARK",
            Self::Vmap { .. } => "vmap",
            Self::None => "",
        }
    }
}

/// `--to-destination`/`--to-source`: an address range and an optional port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatTo {
    pub lo: IpAddr,
    pub hi: IpAddr,
    pub ports: Option<(u16, u16)>,
}

impl NatTo {
    /// True when `ip:port` is one of the addresses this target maps to.
    #[must_use]
    pub fn covers(&self, ip: IpAddr, port: u16) -> bool {
        in_range(ip, self.lo, self.hi)
            && self.ports.is_none_or(|(lo, hi)| (lo..=hi).contains(&port))
    }
}

/// An address prefix (`-s`/`-d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `10.0.0.0/255.0.0.0`, `fd00::/8` or a bare address.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let (addr, prefix) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = addr.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            "" => max,
            p => p.parse::<u8>().ok().or_else(|| mask_len(p))?,
        };
        (prefix <= max).then_some(Self { addr, prefix })
    }

    /// True when `ip` is inside the prefix (always false across address families).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(a) => (u128::from(a.to_bits()) << 96, 4),
            IpAddr::V6(a) => (a.to_bits(), 6),
        };
        // IPv4 sits in the top 32 bits, so the prefix counts from the top for both families.
        let ((net, fa), (ip, fb)) = (bits(self.addr), bits(ip));
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.prefix))
            .unwrap_or(0);
        fa == fb && (net ^ ip) & mask == 0
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Prefix length of a dotted IPv4 mask such as `255.255.0.0`.
fn mask_len(mask: &str) -> Option<u8> {
    let bits = mask.parse::<std::net::Ipv4Addr>().ok()?.to_bits();
    let len = bits.leading_ones();
    (bits.checked_shl(len).unwrap_or(0) == 0)
        .then(|| u8::try_from(len).ok())
        .flatten()
}

/// True when `ip` lies in `lo..=hi` (same family).
#[must_use]
pub fn in_range(ip: IpAddr, lo: IpAddr, hi: IpAddr) -> bool {
    match (ip, lo, hi) {
        (IpAddr::V4(i), IpAddr::V4(l), IpAddr::V4(h)) => (l..=h).contains(&i),
        (IpAddr::V6(i), IpAddr::V6(l), IpAddr::V6(h)) => (l..=h).contains(&i),
        _ => false,
    }
}

impl NatRules {
    /// Parses a dump; lines of other tables (`*filter`) and unreadable lines are skipped.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut rules = Self::default();
        let mut in_nat = true;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line == "COMMIT" {
                continue;
            }
            if let Some(table) = line.strip_prefix('*') {
                in_nat = table.trim() == "nat";
            } else if !in_nat || !rules.parse_line(line) {
                rules.skipped_lines += 1;
            }
        }
        rules
    }

    /// One line; false when it is not a chain declaration or rule.
    fn parse_line(&mut self, line: &str) -> bool {
        if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split_whitespace().next().unwrap_or("");
            return !name.is_empty() && {
                self.chain_mut(name);
                true
            };
        }
        // `iptables-save -c` puts counters first: `[0:0] -A …`.
        let line = if line.starts_with('[') {
            line.split_once(']').map_or("", |(_, l)| l)
        } else {
            line
        };
        let tokens = split(line);
        match tokens.as_slice() {
            [flag, chain, ..] if flag == "-N" || flag == "-P" => {
                self.chain_mut(chain);
                true
            }
            [flag, chain, rest @ ..] if flag == "-A" || flag == "--append" => {
                let rule = parse_rule(rest);
                self.chain_mut(chain).rules.push(rule);
                true
            }
            _ => false,
        }
    }

    fn chain_mut(&mut self, name: &str) -> &mut Chain {
        let i = *self.by_name.entry(name.to_owned()).or_insert_with(|| {
            self.chains.push(Chain {
                name: name.to_owned(),
                rules: Vec::new(),
            });
            self.chains.len() - 1
        });
        &mut self.chains[i]
    }

    /// The chain called `name`, if declared or used.
    #[must_use]
    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.by_name.get(name).and_then(|&i| self.chains.get(i))
    }

    /// Every chain, in the order of the dump.
    pub fn chains(&self) -> impl Iterator<Item = &Chain> {
        self.chains.iter()
    }

    /// The base chains on `hook`, in priority order.
    #[must_use]
    pub fn bases_of(&self, hook: Hook) -> Vec<(i32, &str)> {
        if self.bases.is_empty() {
            let (priority, chain) = hook.builtin();
            return vec![(priority, chain)];
        }
        let mut out: Vec<(i32, &str)> = self
            .bases
            .iter()
            .filter(|b| b.hook == hook)
            .map(|b| (b.priority, b.chain.as_str()))
            .collect();
        out.sort_by_key(|&(p, _)| p);
        out
    }

    /// The table's index, built on first use.
    pub fn index(&self) -> &Index {
        self.index.0.get_or_init(|| self.build_index())
    }

    /// The chain at `index` in dump order.
    #[must_use]
    pub fn chain_at(&self, index: usize) -> Option<&Chain> {
        self.chains.get(index)
    }

    fn build_index(&self) -> Index {
        let mut index = Index::default();
        for (ci, chain) in self.chains.iter().enumerate() {
            for (ri, rule) in chain.rules.iter().enumerate() {
                let mut targets: Vec<&Target> = vec![&rule.target];
                if let Target::Vmap { map, .. } = &rule.target {
                    targets.extend(self.map_elems(map).unwrap_or(&[]).iter().map(|(_, t)| t));
                }
                for target in targets {
                    match target {
                        Target::Dnat(Some(to)) if to.lo == to.hi => {
                            index.dnat_by_ip.entry(to.lo).or_default().push((ci, ri));
                        }
                        Target::Dnat(Some(_)) => index.dnat_ranged.push((ci, ri)),
                        Target::Jump(n) | Target::Goto(n) => {
                            let parents = index.parents.entry(n.clone()).or_default();
                            if parents.last() != Some(&ci) {
                                parents.push(ci);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        index
    }

    /// Elements of a set reference.
    #[must_use]
    pub fn set_elems<'a>(&'a self, set: &'a SetRef) -> Option<&'a [Vec<Val>]> {
        match set {
            SetRef::Named(n) => self.nft_sets.get(n).map(Vec::as_slice),
            SetRef::Inline(e) => Some(e),
        }
    }

    /// Elements of a verdict map reference.
    #[must_use]
    pub fn map_elems<'a>(&'a self, map: &'a MapRef) -> Option<&'a [(Vec<Val>, Target)]> {
        match map {
            MapRef::Named(n) => self.nft_maps.get(n).map(Vec::as_slice),
            MapRef::Inline(e) => Some(e),
        }
    }

    /// Adds a chain (nftables tables are built, not parsed from text).
    pub fn push_rule(&mut self, chain: &str, rule: Rule) {
        self.chain_mut(chain).rules.push(rule);
    }

    /// Declares a chain without rules.
    pub fn declare(&mut self, chain: &str) {
        self.chain_mut(chain);
    }

    /// True when a rule tests an ipset (then the sets are worth reading).
    #[must_use]
    pub fn uses_ipsets(&self) -> bool {
        self.chains
            .iter()
            .flat_map(|c| &c.rules)
            .any(|r| r.conds.iter().any(|c| matches!(c.test, Test::Set(_))))
    }

    /// Number of rules in the table.
    #[must_use]
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}

/// Splits a line into words; `"…"` quotes (with `\"` and `\\`) make one word.
fn split(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            '\\' if quoted => word.get_or_insert_with(String::new).extend(chars.next()),
            c if c.is_whitespace() && !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Parses what follows `-A CHAIN`.
fn parse_rule(tokens: &[String]) -> Rule {
    let mut p = RuleParser {
        tokens,
        i: 0,
        negated: false,
        module: String::new(),
    };
    let mut rule = Rule {
        conds: Vec::new(),
        target: Target::None,
        comment: None,
    };
    while p.i < tokens.len() {
        p.step(&mut rule);
    }
    rule
}

struct RuleParser<'a> {
    tokens: &'a [String],
    i: usize,
    negated: bool,
    /// The last `-m` module: options after it belong to it.
    module: String,
}

impl RuleParser<'_> {
    /// The value after the current option, consumed.
    fn value(&mut self) -> Option<&str> {
        self.i += 1;
        let v = self.tokens.get(self.i).map(String::as_str);
        self.i += 1;
        v
    }

    fn push(&mut self, rule: &mut Rule, test: Test) {
        rule.conds.push(Cond {
            negated: std::mem::take(&mut self.negated),
            test,
        });
    }

    /// Consumes one option (and its values) from the token list.
    fn step(&mut self, rule: &mut Rule) {
        let tok = self.tokens[self.i].as_str();
        let test = match tok {
            "!" => {
                self.negated = true;
                self.i += 1;
                return;
            }
            "-m" | "--match" => {
                self.module = self.value().unwrap_or("").to_owned();
                if self.module == "statistic" {
                    self.push(rule, Test::Statistic);
                }
                return;
            }
            "-j" | "--jump" => {
                rule.target = self.target(false);
                return;
            }
            "-g" | "--goto" => {
                rule.target = self.target(true);
                return;
            }
            "--comment" => {
                rule.comment = self.value().map(str::to_owned);
                return;
            }
            "-c" | "--set-counters" => {
                self.i += 3;
                return;
            }
            "-s" | "--source" => self.cidr(true),
            "-d" | "--destination" => self.cidr(false),
            "-p" | "--protocol" => self.value().and_then(proto_number).map(Test::Proto),
            "-i" | "--in-interface" => self.value().map(|v| Test::InIface(v.to_owned())),
            "-o" | "--out-interface" => self.value().map(|v| Test::OutIface(v.to_owned())),
            "--dport" | "--dports" | "--destination-port" | "--destination-ports" => {
                self.value().and_then(ports).map(Test::Dport)
            }
            "--sport" | "--sports" | "--source-port" | "--source-ports" => {
                self.value().and_then(ports).map(Test::Sport)
            }
            "--mark" if self.module == "mark" => self
                .value()
                .and_then(value_mask)
                .map(|(value, mask)| Test::Mark { value, mask }),
            "--dst-type" | "--src-type" if self.module == "addrtype" => {
                let dst = tok == "--dst-type";
                self.value().map(|k| Test::AddrType {
                    dst,
                    kind: k.to_ascii_uppercase(),
                })
            }
            "--src-range" | "--dst-range" if self.module == "iprange" => {
                let dst = tok == "--dst-range";
                self.value()
                    .and_then(ip_range)
                    .map(|(lo, hi)| Test::Range { dst, lo, hi })
            }
            "--match-set" | "--set" if self.module == "set" => self.match_set(),
            "--return-nomatch" if self.module == "set" => {
                self.i += 1;
                if let Some(Cond {
                    test: Test::Set(m), ..
                }) = rule.conds.last_mut()
                {
                    m.return_nomatch = true;
                }
                return;
            }
            "--update-counters" | "--update-subcounters" if self.module == "set" => {
                // `! --update-counters` changes bookkeeping, not the match.
                self.negated = false;
                self.i += 1;
                return;
            }
            _ if self.module == "statistic" => {
                self.skip_option();
                return;
            }
            _ => Some(self.unknown()),
        };
        let test = test.unwrap_or_else(|| Test::Unknown(format!("{tok} (unreadable value)")));
        self.push(rule, test);
    }

    /// `NAME src,dst`.
    fn match_set(&mut self) -> Option<Test> {
        self.i += 1;
        let name = self.tokens.get(self.i)?.clone();
        let flags = self.tokens.get(self.i + 1)?;
        self.i += 2;
        let dst = flags
            .split(',')
            .map(|f| match f {
                "src" => Some(false),
                "dst" => Some(true),
                _ => None,
            })
            .collect::<Option<Vec<bool>>>()?;
        Some(Test::Set(SetMatch {
            name,
            dst,
            return_nomatch: false,
        }))
    }

    fn cidr(&mut self, src: bool) -> Option<Test> {
        let cidr = Cidr::parse(self.value()?)?;
        Some(if src {
            Test::Src(cidr)
        } else {
            Test::Dst(cidr)
        })
    }

    /// Skips an option and the values after it (words not starting with `-`).
    fn skip_option(&mut self) -> String {
        let start = self.i;
        self.i += 1;
        while self
            .tokens
            .get(self.i)
            .is_some_and(|t| !t.starts_with('-') && t != "!")
        {
            self.i += 1;
        }
        self.tokens[start..self.i.min(self.tokens.len())].join(" ")
    }

    fn unknown(&mut self) -> Test {
        let text = self.skip_option();
        if self.module.is_empty() {
            Test::Unknown(text)
        } else {
            Test::Unknown(format!("-m {} {text}", self.module))
        }
    }

    /// `-j NAME [options…]` (the options run to the end of the line).
    fn target(&mut self, goto: bool) -> Target {
        let name = self.value().unwrap_or("").to_owned();
        let opts = self.tokens.get(self.i..).unwrap_or(&[]);
        self.i = self.tokens.len();
        let opt = |key: &str| {
            opts.iter()
                .position(|t| t == key)
                .and_then(|i| opts.get(i + 1))
                .map(String::as_str)
        };
        if goto {
            return Target::Goto(name);
        }
        match name.as_str() {
            "RETURN" => Target::Return,
            "DNAT" => Target::Dnat(opt("--to-destination").and_then(nat_to)),
            "SNAT" => Target::Snat(opt("--to-source").and_then(nat_to)),
            "MASQUERADE" => Target::Masquerade,
            "MARK" => mark_target(opts),
            "ACCEPT" | "DROP" | "REJECT" | "REDIRECT" | "NETMAP" | "TPROXY" => Target::Stop(name),
            // Targets that only log or trace and go on.
            "" | "LOG" | "NFLOG" | "ULOG" | "TRACE" | "AUDIT" => Target::None,
            _ => Target::Jump(name),
        }
    }
}

/// `-j MARK --set-xmark V/M` (what iptables-save prints), `--set-mark`, `--or-mark`,
/// `--and-mark`, `--xor-mark`.
fn mark_target(opts: &[String]) -> Target {
    let get = |key: &str| {
        opts.iter()
            .position(|t| t == key)
            .and_then(|i| opts.get(i + 1))
            .map(String::as_str)
    };
    if let Some((xor, clear)) = get("--set-xmark").and_then(value_mask) {
        return Target::Mark { clear, xor };
    }
    if let Some((v, m)) = get("--set-mark").and_then(value_mask) {
        return Target::Mark {
            clear: m | v,
            xor: v,
        };
    }
    if let Some(v) = get("--or-mark").and_then(number) {
        return Target::Mark { clear: v, xor: v };
    }
    if let Some(v) = get("--and-mark").and_then(number) {
        return Target::Mark { clear: !v, xor: 0 };
    }
    if let Some(v) = get("--xor-mark").and_then(number) {
        return Target::Mark { clear: 0, xor: v };
    }
    Target::Stop("MARK (unreadable)".into())
}

fn number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `0x4000/0x4000` → (value, mask); a bare value has mask `0xffffffff`.
fn value_mask(s: &str) -> Option<(u32, u32)> {
    match s.split_once('/') {
        Some((v, m)) => Some((number(v)?, number(m)?)),
        None => Some((number(s)?, u32::MAX)),
    }
}

/// Protocol number of `tcp`, `udp`, `6`, … (0 for `all`).
fn proto_number(s: &str) -> Option<u8> {
    Some(match s.to_ascii_lowercase().as_str() {
        "all" => 0,
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        other => other.parse().ok()?,
    })
}

/// `80`, `1000:2000`, `80,443,8000:8080`.
fn ports(s: &str) -> Option<Vec<(u16, u16)>> {
    s.split(',')
        .map(|p| match p.split_once(':') {
            Some((lo, hi)) => Some((lo.parse().unwrap_or(0), hi.parse().unwrap_or(u16::MAX))),
            None => p.parse().ok().map(|p| (p, p)),
        })
        .collect()
}

/// `10.0.0.1-10.0.0.9` or a single address.
fn ip_range(s: &str) -> Option<(IpAddr, IpAddr)> {
    match s.split_once('-') {
        Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
        None => s.parse().ok().map(|ip| (ip, ip)),
    }
}

/// `10.13.76.26:80`, `10.0.0.1-10.0.0.9:1000-2000`, `[fd00::1]:80`, `fd00::1`.
fn nat_to(s: &str) -> Option<NatTo> {
    let (addrs, ports) = if let Some(rest) = s.strip_prefix('[') {
        let (addrs, after) = rest.split_once(']')?;
        (addrs, after.strip_prefix(':'))
    } else if s.matches(':').count() == 1 {
        let (a, p) = s.split_once(':')?;
        (a, Some(p))
    } else {
        (s, None)
    };
    let (lo, hi) = ip_range(addrs)?;
    let ports = match ports {
        None => None,
        Some(p) => Some(match p.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => (p.parse().ok()?, p.parse().ok()?),
        }),
    };
    Some(NatTo { lo, hi, ports })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(line: &str) -> Rule {
        let rules = NatRules::parse(line);
        rules
            .chains()
            .flat_map(|c| c.rules.clone())
            .next()
            .expect(line)
    }

    fn cond(negated: bool, test: Test) -> Cond {
        Cond { negated, test }
    }

    fn cidr(s: &str) -> Cidr {
        Cidr::parse(s).unwrap()
    }

    #[test]
    fn splits_quoted_words() {
        let cases: &[(&str, &[&str])] = &[
            ("-A X -j Y", &["-A", "X", "-j", "Y"]),
            (r#"--comment "a b" x"#, &["--comment", "a b", "x"]),
            (r#"--comment "say \"hi\"""#, &["--comment", r#"say "hi""#]),
            (r#"--comment """#, &["--comment", ""]),
            (r#""unterminated"#, &["unterminated"]),
            ("  ", &[]),
        ];
        for (line, want) in cases {
            assert_eq!(split(line), *want, "{line}");
        }
    }

    #[test]
    fn parses_rules() {
        let cases: Vec<(&str, Vec<Cond>, Target, Option<&str>)> = vec![
            (
                r#"-A KUBE-SERVICES ! -s 10.13.76.0/24 -d 10.0.159.58/32 -p tcp -m comment --comment "default/whereami: cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ"#,
                vec![
                    cond(true, Test::Src(cidr("10.13.76.0/24"))),
                    cond(false, Test::Dst(cidr("10.0.159.58/32"))),
                    cond(false, Test::Proto(6)),
                    cond(false, Test::Dport(vec![(80, 80)])),
                ],
                Target::Jump("KUBE-MARK-MASQ".into()),
                Some("default/whereami: cluster IP"),
            ),
            (
                "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
                vec![cond(
                    true,
                    Test::Mark {
                        value: 0x4000,
                        mask: 0x4000,
                    },
                )],
                Target::Return,
                None,
            ),
            (
                "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
                vec![],
                Target::Mark {
                    clear: 0x4000,
                    xor: 0x4000,
                },
                None,
            ),
            (
                "-A P -m addrtype ! --dst-type LOCAL -o eth0 -m iprange --dst-range 10.0.0.1-10.0.0.9 -g IP-MASQ",
                vec![
                    cond(
                        true,
                        Test::AddrType {
                            dst: true,
                            kind: "LOCAL".into(),
                        },
                    ),
                    cond(false, Test::OutIface("eth0".into())),
                    cond(
                        false,
                        Test::Range {
                            dst: true,
                            lo: "10.0.0.1".parse().unwrap(),
                            hi: "10.0.0.9".parse().unwrap(),
                        },
                    ),
                ],
                Target::Goto("IP-MASQ".into()),
                None,
            ),
            (
                "-A S -m statistic --mode random --probability 0.5 -j KUBE-SEP-A",
                vec![cond(false, Test::Statistic)],
                Target::Jump("KUBE-SEP-A".into()),
                None,
            ),
            (
                "-A C -m set --match-set cali40masq-ipam-pools src -m set ! --match-set all dst,src --return-nomatch ! --update-counters -j MASQUERADE --random-fully",
                vec![
                    cond(
                        false,
                        Test::Set(SetMatch {
                            name: "cali40masq-ipam-pools".into(),
                            dst: vec![false],
                            return_nomatch: false,
                        }),
                    ),
                    cond(
                        true,
                        Test::Set(SetMatch {
                            name: "all".into(),
                            dst: vec![true, false],
                            return_nomatch: true,
                        }),
                    ),
                ],
                Target::Masquerade,
                None,
            ),
            (
                "-A C -p udp -m multiport --dports 53,8000:8080 -m connmark --mark 0x1 -j DNAT --to-destination [fd00::1]:53",
                vec![
                    cond(false, Test::Proto(17)),
                    cond(false, Test::Dport(vec![(53, 53), (8000, 8080)])),
                    cond(false, Test::Unknown("-m connmark --mark 0x1".into())),
                ],
                Target::Dnat(Some(NatTo {
                    lo: "fd00::1".parse().unwrap(),
                    hi: "fd00::1".parse().unwrap(),
                    ports: Some((53, 53)),
                })),
                None,
            ),
            (
                "[5:300] -A C -s 10.0.0.0/255.255.0.0 -d bogus -j SNAT --to-source 192.0.2.1-192.0.2.9:1024-2048",
                vec![
                    cond(false, Test::Src(cidr("10.0.0.0/16"))),
                    cond(false, Test::Unknown("-d (unreadable value)".into())),
                ],
                Target::Snat(Some(NatTo {
                    lo: "192.0.2.1".parse().unwrap(),
                    hi: "192.0.2.9".parse().unwrap(),
                    ports: Some((1024, 2048)),
                })),
                None,
            ),
            (
                "-A C -p",
                vec![cond(false, Test::Unknown("-p (unreadable value)".into()))],
                Target::None,
                None,
            ),
            ("-A C -j", vec![], Target::None, None),
            ("-A C !", vec![], Target::None, None),
        ];
        for (line, conds, target, comment) in cases {
            let r = rule(line);
            assert_eq!(r.conds, conds, "{line}");
            assert_eq!(r.target, target, "{line}");
            assert_eq!(r.comment.as_deref(), comment, "{line}");
        }
    }

    #[test]
    fn parses_dumps_leniently() {
        let text = "# c\n*filter\n-A INPUT -j ACCEPT\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:EMPTY - [0:0]\n\
                    -N KUBE-X\n-P OUTPUT ACCEPT\n-A PREROUTING -j KUBE-X\ngarbage line\n:\nCOMMIT\n";
        let rules = NatRules::parse(text);
        let names: Vec<&str> = rules.chains().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["PREROUTING", "EMPTY", "KUBE-X", "OUTPUT"]);
        assert_eq!((rules.rule_count(), rules.skipped_lines), (1, 3));
        assert!(rules.chain("EMPTY").is_some_and(|c| c.rules.is_empty()));

        let fixture = NatRules::parse(include_str!("../../tests-data/iptables-save-azure-cni.txt"));
        assert_eq!((fixture.rule_count(), fixture.skipped_lines), (31, 0));
        assert!(
            fixture
                .chains()
                .flat_map(|c| &c.rules)
                .all(|r| r.conds.iter().all(|c| !matches!(c.test, Test::Unknown(_))))
        );
    }

    #[test]
    fn cidrs_and_ranges() {
        let cases = [
            ("10.13.0.0/16", "10.13.76.46", true),
            ("10.13.0.0/16", "10.14.0.1", false),
            ("0.0.0.0/0", "203.0.113.80", true),
            ("168.63.129.16/32", "168.63.129.16", true),
            ("168.63.129.16", "168.63.129.17", false),
            ("10.0.0.0/255.0.0.0", "10.9.9.9", true),
            ("fd00::/8", "fd12::1", true),
            ("fd00::/8", "10.0.0.1", false),
            ("0.0.0.0/0", "::1", false),
            ("::/0", "::1", true),
        ];
        for (c, ip, want) in cases {
            assert_eq!(cidr(c).contains(ip.parse().unwrap()), want, "{c} {ip}");
        }
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/255.0.255.0",
            "x/8",
            "fd00::/129",
            "",
        ] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
        let to = nat_to("10.13.76.26:80").unwrap();
        assert!(to.covers("10.13.76.26".parse().unwrap(), 80));
        assert!(!to.covers("10.13.76.26".parse().unwrap(), 81));
        assert!(
            nat_to("10.13.76.26")
                .unwrap()
                .covers("10.13.76.26".parse().unwrap(), 9)
        );
        assert!(
            nat_to("fd00::1")
                .unwrap()
                .covers("fd00::1".parse().unwrap(), 9)
        );
        for bad in ["", "x:80", "10.0.0.1:x", "[fd00::1", "10.0.0.1-x"] {
            assert_eq!(nat_to(bad), None, "{bad}");
        }
    }
}
