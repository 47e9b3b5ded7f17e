//! The names of drop reasons and locations: the kallsyms pass, the table tests give, and
//! the names the kernel gives.

use super::*;

#[test]
fn reasons_lose_their_prefix_and_unknown_ones_are_numbers() {
    let r = Reasons::new(&[
        (0, "SKB_NOT_DROPPED_YET".into()),
        (1, "SKB_CONSUMED".into()),
        (2, "SKB_DROP_REASON_NOT_SPECIFIED".into()),
        (3, "SKB_DROP_REASON_NO_SOCKET".into()),
    ]);
    assert_eq!(&*r.name(3), "NO_SOCKET");
    assert_eq!(&*r.name(1), "CONSUMED");
    assert_eq!(&*r.name(77), "77");
    assert_eq!(&*r.name(DROP_REASON_UNKNOWN), "NOT_SPECIFIED");
    assert!(!r.is_drop(0) && !r.is_drop(1));
    assert!(r.is_drop(2) && r.is_drop(3) && r.is_drop(77));
    assert!(Reasons::default().is_drop(DROP_REASON_UNKNOWN));
}

#[test]
fn an_address_is_named_by_the_text_symbol_at_or_below_it() {
    let s = Symbols::parse(
        "ffffffff81a00000 T tcp_v4_rcv\n\
         ffffffff81900000 t ip_error\n\
         ffffffff81950000 D some_data\n\
         ffffffffc0400000 t nft_do_chain\t[nf_tables]\n",
    )
    .unwrap();
    assert_eq!(
        s.function(0xffff_ffff_81a0_0123).as_deref(),
        Some("tcp_v4_rcv")
    );
    assert_eq!(
        s.function(0xffff_ffff_8195_0001).as_deref(),
        Some("ip_error")
    );
    assert_eq!(
        s.function(0xffff_ffff_c040_0010).as_deref(),
        Some("nft_do_chain")
    );
    assert_eq!(s.function(0x1000), None);
}

#[test]
fn one_pass_over_a_listing_finds_the_same_function_as_the_table() {
    let listing = "ffffffff81a00000 T tcp_v4_rcv\n\
                   ffffffff81900000 t ip_error\n\
                   ffffffff81950000 D some_data\n\
                   ffffffffc0400000 t nft_do_chain\t[nf_tables]\n";
    // Also listed in order, as the kernel lists its image: the same answers, without
    // reading past the address in the image.
    let ordered = "ffffffff81900000 t ip_error\n\
                   ffffffff81950000 D some_data\n\
                   ffffffff81a00000 T tcp_v4_rcv\n\
                   ffffffff81b00000 T udp_rcv\n\
                   ffffffffc0400000 t nft_do_chain\t[nf_tables]\n\
                   ffffffffc0300000 t nf_nat_setup_info\t[nf_nat]\n";
    for text in [listing, ordered] {
        let table = Symbols::parse(text).unwrap();
        for addr in [
            0x1000,
            0xffff_ffff_8195_0001,
            0xffff_ffff_81a0_0123,
            0xffff_ffff_c030_0004,
            0xffff_ffff_c040_0010,
            u64::MAX,
        ] {
            let streamed = match function_in(text.as_bytes(), addr).unwrap() {
                Lookup::Function(name) => Some(name),
                Lookup::Below => None,
                Lookup::Hidden => panic!("addresses are shown"),
            };
            assert_eq!(streamed, table.function(addr), "{addr:x}");
        }
    }
    let mut read = Lines(ordered.as_bytes(), 0);
    function_in(&mut read, 0xffff_ffff_81a0_0123).unwrap();
    assert_eq!(
        read.1, 4,
        "stops at udp_rcv, the image's first symbol past the address"
    );
    let hidden = "0000000000000000 T tcp_v4_rcv\n0000000000000000 t ip_error\n";
    assert_eq!(function_in(hidden.as_bytes(), 5).unwrap(), Lookup::Hidden);
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
        // One line at a time, so that each `read_line` is one line.
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
fn hidden_addresses_give_no_symbols() {
    assert!(
        Symbols::parse("0000000000000000 T tcp_v4_rcv\n0000000000000000 t ip_error\n").is_none()
    );
    let mut names = DropNames::with_symbols(Reasons::default(), Symbols::default());
    assert_eq!(&*names.location(0xffff_ffff_8100_0000), "unknown");
}

#[test]
fn the_kernels_name_is_the_function_without_its_module() {
    assert_eq!(function_of(b"tcp_v4_rcv"), Some("tcp_v4_rcv"));
    assert_eq!(
        function_of(b"nft_do_chain [nf_tables]"),
        Some("nft_do_chain")
    );
    assert_eq!(
        function_of(b"ip_rcv_finish_core.isra.0"),
        Some("ip_rcv_finish_core.isra.0")
    );
    // No symbol there, or no text the kernel would write: nothing learnt.
    for none in [
        &b"0xffffffffc0401234"[..],
        b"",
        b" [nf_tables]",
        b"\xff\xfe",
        b"a\nb",
    ] {
        assert_eq!(function_of(none), None, "{none:?}");
    }
}

/// A listing that names every address differently from the kernel, so that the answer shows
/// where it came from.
fn other_names() -> DropNames {
    let symbols = Symbols::parse("ffffffff81000000 T from_kallsyms\n").unwrap();
    DropNames::with_symbols(Reasons::default(), symbols)
}

#[test]
fn a_learnt_name_is_given_without_a_pass() {
    let mut names = other_names();
    names.learn(0xffff_ffff_8100_0040, b"nft_do_chain [nf_tables]");
    assert_eq!(&*names.location(0xffff_ffff_8100_0040), "nft_do_chain");
    // An address the kernel did not name is looked up.
    assert_eq!(&*names.location(0xffff_ffff_8100_0080), "from_kallsyms");
    // A kernel name replaces a name looked up before it.
    names.learn(0xffff_ffff_8100_0080, b"tcp_v4_rcv");
    assert_eq!(&*names.location(0xffff_ffff_8100_0080), "tcp_v4_rcv");
    // A bare address teaches nothing: the lookup answers.
    names.learn(0xffff_ffff_8100_00c0, b"0xffffffff810000c0");
    assert_eq!(&*names.location(0xffff_ffff_8100_00c0), "from_kallsyms");
}

#[test]
fn kept_names_stay_within_their_bytes() {
    let mut kept = Kept::default();
    let name: Rc<str> = Rc::from("a".repeat(200));
    let mut addr = 0;
    while kept.bytes() + 264 <= kept::KEPT_BYTES {
        kept.insert(addr, Rc::clone(&name));
        addr += 1;
    }
    let full = kept.len();
    assert!(full > 900, "{full}");
    // Keeping the same address again costs nothing more.
    kept.insert(0, Rc::clone(&name));
    assert_eq!(kept.len(), full);
    // One more is past the bound: the table starts again, holding only it.
    kept.insert(addr, Rc::clone(&name));
    assert_eq!(kept.len(), 1);
    assert_eq!(kept.get(addr).as_deref(), Some(&*name));
    assert!(kept.bytes() <= kept::KEPT_BYTES);
}
