use std::fmt::Write as _;

use super::*;

/// Out of order, as a test can give it; the module symbol last.
const LISTING: &str = "ffffffff81a00000 T tcp_v4_rcv\n\
                       ffffffff81900000 t ip_error\n\
                       ffffffff81950000 D some_data\n\
                       ffffffffc0400000 t nft_do_chain\t[nf_tables]\n";

/// In order, as the kernel lists its image, then modules out of order.
const ORDERED: &str = "ffffffff81900000 t ip_error\n\
                       ffffffff81950000 D some_data\n\
                       ffffffff81a00000 T tcp_v4_rcv\n\
                       ffffffff81a00000 t tcp_v4_rcv_alias\n\
                       ffffffff81b00000 T udp_rcv\n\
                       ffffffffc0400000 t nft_do_chain\t[nf_tables]\n\
                       ffffffffc0300000 t nf_nat_setup_info\t[nf_nat]\n";

const ADDRS: [u64; 6] = [
    0x1000,
    0xffff_ffff_8195_0001,
    0xffff_ffff_81a0_0123,
    0xffff_ffff_c030_0004,
    0xffff_ffff_c040_0010,
    u64::MAX,
];

fn streamed(listing: &str, addr: u64) -> Option<String> {
    match function_in(listing.as_bytes(), addr).unwrap() {
        Listing::Found(name) => name,
        Listing::Hidden => panic!("addresses are shown"),
    }
}

#[test]
fn an_address_is_named_by_the_text_symbol_at_or_below_it() {
    let s = Symbols::parse(LISTING).unwrap();
    assert_eq!(s.function(0xffff_ffff_81a0_0123), Some("tcp_v4_rcv"));
    assert_eq!(s.function(0xffff_ffff_8195_0001), Some("ip_error"));
    assert_eq!(s.function(0xffff_ffff_c040_0010), Some("nft_do_chain"));
    assert_eq!(s.function(0x1000), None);
    // Of two symbols at one address, the one listed first.
    let s = Symbols::parse(ORDERED).unwrap();
    assert_eq!(s.function(0xffff_ffff_81a0_0123), Some("tcp_v4_rcv"));
}

#[test]
fn one_pass_finds_the_same_function_as_the_table() {
    for listing in [LISTING, ORDERED] {
        let table = Symbols::parse(listing).unwrap();
        for addr in ADDRS {
            assert_eq!(
                streamed(listing, addr).as_deref(),
                table.function(addr),
                "{addr:x}"
            );
        }
    }
}

#[test]
fn a_pass_ends_past_the_address_in_the_kernel_image() {
    let mut read = Lines(ORDERED.as_bytes(), 0);
    function_in(&mut read, 0xffff_ffff_81a0_0123).unwrap();
    assert_eq!(
        read.1, 5,
        "stops at udp_rcv, the image's first symbol past the address"
    );
    let mut read = Lines(ORDERED.as_bytes(), 0);
    function_in(&mut read, 0xffff_ffff_c030_0004).unwrap();
    assert_eq!(read.1, 7, "a module's address: the whole listing");
}

#[test]
fn the_table_is_not_kept_past_its_byte_limit() {
    let full = Symbols::parse(ORDERED).unwrap();
    assert_eq!(
        full.bytes(),
        8 * 16 + BLOCK,
        "eight entries' room, one block of names"
    );
    let fits = Symbols::read(ORDERED.as_bytes(), full.bytes()).unwrap();
    assert!(matches!(fits, Listing::Found(Some(_))));
    let over = Symbols::read(ORDERED.as_bytes(), BLOCK).unwrap();
    assert!(matches!(over, Listing::Found(None)));
}

#[test]
fn hidden_addresses_give_no_symbols() {
    let hidden = "0000000000000000 T tcp_v4_rcv\n0000000000000000 t ip_error\n";
    assert!(Symbols::parse(hidden).is_none());
    assert!(matches!(
        function_in(hidden.as_bytes(), 5).unwrap(),
        Listing::Hidden
    ));
    assert!(matches!(
        Symbols::read(hidden.as_bytes(), usize::MAX).unwrap(),
        Listing::Hidden
    ));
}

/// A listing that counts the lines read from it.
struct Lines<'a>(&'a [u8], usize);

impl io::Read for Lines<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl BufRead for Lines<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        // One line at a time, so that each `read_until` is one line.
        let end = self
            .0
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.0.len(), |i| i + 1);
        Ok(&self.0[..end])
    }

    fn consume(&mut self, n: usize) {
        if n > 0 && self.0[..n].ends_with(b"\n") {
            self.1 += 1;
        }
        self.0 = &self.0[n..];
    }
}

#[test]
fn names_spread_over_blocks_are_found_in_each() {
    let mut listing = String::new();
    for i in 0..6000u64 {
        let _ = writeln!(
            listing,
            "{:016x} t function_number_{i:05}",
            0xffff_ffff_8100_0000 + i * 16
        );
    }
    let s = Symbols::parse(&listing).unwrap();
    assert!(s.blocks.len() >= 2, "{} blocks", s.blocks.len());
    for i in [0u64, 2999, 3500, 5999] {
        let want = format!("function_number_{i:05}");
        assert_eq!(s.function(0xffff_ffff_8100_0000 + i * 16 + 7), Some(&*want));
    }
}
