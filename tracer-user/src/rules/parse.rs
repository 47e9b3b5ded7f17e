//! Parsing `iptables-save -t nat` (or `iptables -t nat -S`) text into a [`NatRules`]: lines
//! into words, `-A` lines into rules option by option. Never fails: unknown matches become
//! [`Test::Unknown`], unreadable lines are counted in `skipped_lines`.

use std::net::IpAddr;

use super::{Cidr, Cond, NatRules, NatTo, Rule, Target, Test};
use crate::rules::ipset::SetMatch;

impl NatRules {
    /// Parses a dump; lines of other tables (`*filter`) and unreadable lines are skipped.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        Self::parse_table(text, "nat")
    }

    /// Parses the rules of `table` (`nat`, `filter`, `raw`, `mangle`) in a dump; lines of
    /// other tables and unreadable lines are skipped. Lines before any `*table` header
    /// count as `table`'s (`iptables -t filter -S`). Tables other than nat keep each
    /// rule's text and the chains' policies.
    #[must_use]
    pub fn parse_table(text: &str, table: &str) -> Self {
        let mut rules = Self::default();
        let keep_text = table != "nat";
        let mut inside = true;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line == "COMMIT" {
                continue;
            }
            if let Some(name) = line.strip_prefix('*') {
                inside = name.trim() == table;
            } else if !inside || !rules.parse_line(line, keep_text) {
                rules.skipped_lines += 1;
            }
        }
        rules
    }

    /// One line; false when it is not a chain declaration or rule.
    fn parse_line(&mut self, line: &str, keep_text: bool) -> bool {
        if let Some(decl) = line.strip_prefix(':') {
            let mut words = decl.split_whitespace();
            let name = words.next().unwrap_or("");
            if let Some(policy) = words.next().filter(|p| *p != "-" && *p != "ACCEPT") {
                self.policies.insert(name.to_owned(), policy.to_owned());
            }
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
            [flag, chain, policy, ..] if flag == "-P" && policy != "ACCEPT" => {
                self.policies.insert(chain.clone(), policy.clone());
                self.chain_mut(chain);
                true
            }
            [flag, chain, ..] if flag == "-N" || flag == "-P" => {
                self.chain_mut(chain);
                true
            }
            [flag, chain, rest @ ..] if flag == "-A" || flag == "--append" => {
                let rule = parse_rule(rest);
                self.chain_mut(chain).rules.push(rule);
                if keep_text {
                    let texts = self.texts.entry(chain.clone()).or_default();
                    texts.push(line.trim().to_owned());
                }
                true
            }
            _ => false,
        }
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
        let tokens = self.tokens;
        let tok = tokens[self.i].as_str();
        if self.rule_option(rule, tok) {
            return;
        }
        let test = match self.condition(tok) {
            Some(test) => test,
            None if self.set_bookkeeping(rule, tok) => return,
            None if self.module == "statistic" => {
                self.skip_option();
                return;
            }
            None => Some(self.unknown()),
        };
        let test = test.unwrap_or_else(|| Test::Unknown(format!("{tok} (unreadable value)")));
        self.push(rule, test);
    }

    /// Options that are not conditions: `!`, `-m`, the target, the comment and counters. True
    /// when `tok` was one of them (consumed).
    fn rule_option(&mut self, rule: &mut Rule, tok: &str) -> bool {
        match tok {
            "!" => {
                self.negated = true;
                self.i += 1;
            }
            "-m" | "--match" => {
                self.module = self.value().unwrap_or("").to_owned();
                if self.module == "statistic" {
                    self.push(rule, Test::Statistic);
                }
            }
            "-j" | "--jump" => rule.target = self.target(false),
            "-g" | "--goto" => rule.target = self.target(true),
            "--comment" => rule.comment = self.value().map(str::to_owned),
            "-c" | "--set-counters" => self.i += 3,
            _ => return false,
        }
        true
    }

    /// The condition option `tok` starts, with its value consumed: `None` when `tok` is no
    /// condition pktrace reads, `Some(None)` when its value is unreadable.
    #[expect(
        clippy::option_option,
        reason = "not a condition vs an unreadable one, as documented"
    )]
    fn condition(&mut self, tok: &str) -> Option<Option<Test>> {
        Some(match tok {
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
            _ => return None,
        })
    }

    /// `-m set` options that change no match (`--return-nomatch` marks the set match before
    /// it); true when `tok` was one of them (consumed).
    fn set_bookkeeping(&mut self, rule: &mut Rule, tok: &str) -> bool {
        if self.module != "set" {
            return false;
        }
        match tok {
            "--return-nomatch" => {
                self.i += 1;
                if let Some(Cond {
                    test: Test::Set(m), ..
                }) = rule.conds.last_mut()
                {
                    m.return_nomatch = true;
                }
            }
            "--update-counters" | "--update-subcounters" => {
                // `! --update-counters` changes bookkeeping, not the match.
                self.negated = false;
                self.i += 1;
            }
            _ => return false,
        }
        true
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
        "igmp" => 2,
        // `/etc/protocols` names iptables-save prints (Calico drops `-p ipencap`).
        "ipencap" | "ipip" => 4,
        "tcp" => 6,
        "udp" => 17,
        "ipv6" => 41,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "icmpv6" | "ipv6-icmp" => 58,
        "vrrp" => 112,
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
mod tests;
