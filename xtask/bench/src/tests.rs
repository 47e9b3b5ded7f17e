//! Parsing `--only`.

use super::Phases;

#[test]
fn phases_parse() {
    let p = Phases::parse("hooks, collector").unwrap();
    assert!(p.hooks && p.collector && !p.throughput && !p.paired && !p.startup && !p.micro);
    assert!(!p.unpinned && Phases::parse("unpinned").unwrap().unpinned);
    assert_eq!(
        Phases::parse("throughput,paired,hooks,micro,collector,startup,unpinned").unwrap(),
        Phases::ALL
    );
    let v = Phases::parse("variants").unwrap();
    assert!(v.variants && !Phases::ALL.variants);
    let soak = Phases::parse("soak").unwrap();
    assert!(
        soak.soak && !Phases::ALL.soak,
        "the soak runs only when named"
    );
    assert!(Phases::parse("hook").is_err());
    assert!(Phases::parse(" , ").is_err());
}
