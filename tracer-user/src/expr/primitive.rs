//! A primitive's qualifiers and the test they make of a value (`tcp dst port` + `53`).

use std::net::IpAddr;

use super::{
    ast::{Dir, Family, Test, family_of},
    error::ErrorKind,
    values,
};

/// The protocol word of a primitive (`ip`, `ip6`, `tcp`, `udp`, `icmp`, `icmp6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoQual {
    Ip,
    Ip6,
    Tcp,
    Udp,
    Icmp,
    Icmp6,
}

/// What the value of a primitive is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Host,
    Net,
    Port,
    PortRange,
    Proto,
}

/// The qualifiers of a primitive with a value; a bare value later reuses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quals {
    pub proto: Option<ProtoQual>,
    pub dir: Option<Dir>,
    pub kind: Kind,
}

impl ProtoQual {
    pub fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "ip" => Self::Ip,
            "ip6" => Self::Ip6,
            "tcp" => Self::Tcp,
            "udp" => Self::Udp,
            "icmp" => Self::Icmp,
            "icmp6" => Self::Icmp6,
            _ => return None,
        })
    }

    const fn word(self) -> &'static str {
        match self {
            Self::Ip => "ip",
            Self::Ip6 => "ip6",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Icmp => "icmp",
            Self::Icmp6 => "icmp6",
        }
    }

    /// The family `ip`/`ip6` restrict to (`None` for the others).
    const fn family(self) -> Option<Family> {
        match self {
            Self::Ip => Some(Family::V4),
            Self::Ip6 => Some(Family::V6),
            _ => None,
        }
    }
}

impl Kind {
    pub fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "host" => Self::Host,
            "net" => Self::Net,
            "port" => Self::Port,
            "portrange" => Self::PortRange,
            "proto" => Self::Proto,
            _ => return None,
        })
    }

    /// What the value must be, for "expected …".
    pub const fn expects(self) -> &'static str {
        match self {
            Self::Host => values::ADDRESS,
            Self::Net => values::NETWORK,
            Self::Port => values::PORT,
            Self::PortRange => values::PORT_RANGE,
            Self::Proto => values::PROTOCOL,
        }
    }

    /// The primitive's name in "cannot qualify …".
    const fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Net => "net",
            Self::Port => "port",
            Self::PortRange => "portrange",
            Self::Proto => "proto",
        }
    }
}

impl Quals {
    /// The test these qualifiers make of `word` (and of `mask`, after `net ADDR mask`).
    /// The parser fills in `after` of an `Expected` error.
    pub fn test(self, word: &str, mask: Option<&str>) -> Result<Test, ErrorKind> {
        let dir = self.dir.unwrap_or(Dir::Either);
        match self.kind {
            Kind::Host => {
                let addr = values::address(word).ok_or(ErrorKind::Expected {
                    what: values::ADDRESS,
                    after: None,
                })?;
                self.check_family(addr)?;
                Ok(Test::Host { dir, addr })
            }
            Kind::Net => {
                let net = match mask {
                    Some(m) => values::masked(word, word, m),
                    None => values::network(word),
                }?;
                self.check_family(net.addr)?;
                Ok(Test::Net { dir, net })
            }
            Kind::Port | Kind::PortRange => self.ports(dir, word),
            Kind::Proto => self.proto_number(word),
        }
    }

    fn ports(self, dir: Dir, word: &str) -> Result<Test, ErrorKind> {
        use tracer_common::{PROTO_TCP, PROTO_UDP};
        let proto = match self.proto {
            None => None,
            Some(ProtoQual::Tcp) => Some(PROTO_TCP),
            Some(ProtoQual::Udp) => Some(PROTO_UDP),
            Some(q) => return Err(self.bad_qualifier(q.word())),
        };
        let range = if self.kind == Kind::Port {
            let p = values::port(word)?;
            super::ast::PortRange { first: p, last: p }
        } else {
            values::port_range(word)?
        };
        Ok(Test::Port { dir, proto, range })
    }

    fn proto_number(self, word: &str) -> Result<Test, ErrorKind> {
        if let Some(d) = self.dir {
            let name = if d == Dir::Dst { "dst" } else { "src" };
            return Err(self.bad_qualifier(name));
        }
        let family = match self.proto {
            None => None,
            Some(q @ (ProtoQual::Ip | ProtoQual::Ip6)) => q.family(),
            Some(q) => return Err(self.bad_qualifier(q.word())),
        };
        let proto = values::number(word, values::PROTOCOL, u32::from(u8::MAX))?;
        let proto = u8::try_from(proto).unwrap_or(u8::MAX);
        Ok(Test::Proto { family, proto })
    }

    /// `ip` goes with IPv4 addresses, `ip6` with IPv6 ones, no other protocol with any.
    fn check_family(self, addr: IpAddr) -> Result<(), ErrorKind> {
        let Some(q) = self.proto else { return Ok(()) };
        match q.family() {
            Some(f) if f == family_of(addr) => Ok(()),
            Some(_) => Err(ErrorKind::Qualifier {
                qualifier: q.word(),
                primitive: match addr {
                    IpAddr::V4(_) => "an IPv4 address",
                    IpAddr::V6(_) => "an IPv6 address",
                },
            }),
            None => Err(self.bad_qualifier(q.word())),
        }
    }

    const fn bad_qualifier(self, qualifier: &'static str) -> ErrorKind {
        ErrorKind::Qualifier {
            qualifier,
            primitive: self.kind.name(),
        }
    }
}
