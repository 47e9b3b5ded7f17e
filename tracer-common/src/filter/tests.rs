use super::*;

#[test]
fn exact_set_holds_its_addresses_only() {
    let a = [[10, 0, 0, 1], [192, 0, 2, 7]];
    let set = AddrSetV4::of(&a);
    assert_eq!((set.exact, set.len), (1, 2));
    assert!(set.contains(u32::from_ne_bytes([10, 0, 0, 1])));
    assert!(set.contains(u32::from_ne_bytes([192, 0, 2, 7])));
    assert!(!set.contains(u32::from_ne_bytes([10, 0, 0, 2])));
    // Unused slots are zero but not members.
    assert!(!set.contains(0));
}

#[test]
fn empty_set_is_exact_and_holds_nothing() {
    let set = AddrSetV4::of(&[]);
    assert_eq!((set.exact, set.len), (1, 0));
    assert!(!set.contains(0));
}

#[test]
#[expect(
    clippy::cast_possible_truncation,
    reason = "`V4_SET_MAX` + 1 addresses, fewer than 256"
)]
fn too_many_addresses_fall_back_to_the_map() {
    let many: Vec<[u8; 4]> = (0..=V4_SET_MAX as u8).map(|i| [10, 0, 0, i]).collect();
    assert_eq!(AddrSetV4::of(&many).exact, 0);
    let fit = &many[..V4_SET_MAX];
    let set = AddrSetV4::of(fit);
    assert_eq!(set.exact, 1);
    assert!(fit.iter().all(|a| set.contains(u32::from_ne_bytes(*a))));
    // The zero value (before user space writes it) says "ask the map".
    assert_eq!(AddrSetV4::default().exact, 0);
}

#[test]
fn contains_either_is_contains_of_one_or_the_other() {
    let set = AddrSetV4::of(&[[10, 0, 0, 1], [192, 0, 2, 7]]);
    let member = u32::from_ne_bytes([192, 0, 2, 7]);
    let other = u32::from_ne_bytes([10, 0, 0, 2]);
    assert!(set.contains_either(member, other));
    assert!(set.contains_either(other, member));
    assert!(!set.contains_either(other, 0));
    assert!(!AddrSetV4::of(&[]).contains_either(member, other));
}
