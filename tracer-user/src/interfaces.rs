//! The node's interfaces and tc: listing them ([`iface`]), what each is to the node (pod veth,
//! bridge, uplink: [`roles`], over rtnetlink), link events while tracing ([`links`]), and the tc
//! programs attached to them ([`tc`]), by tcx or clsact as [`policy`] decides, with clsact's
//! qdiscs recorded and swept ([`clsact`]).

pub mod clsact;
pub mod iface;
pub mod links;
pub mod policy;
pub mod roles;
pub mod tc;
