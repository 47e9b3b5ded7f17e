//! [`super::RingReader`] against a fake ring: a memfd laid out as the kernel's ring buffer map
//! (consumer page, producer page, data pages; kernel/bpf/ringbuf.c), whose data pages the
//! fake producer writes twice in a row, as the kernel's double mapping shows them, so that a
//! record wrapping around the end reads as one.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
};

use super::{BUSY_BIT, DISCARD_BIT, HDR_SZ, PUBLISH_EVERY, RingReader};

/// Data bytes of the fake ring: one page, the smallest ring the kernel makes.
const SIZE: usize = 4096;

struct FakeRing {
    fd: OwnedFd,
    base: NonNull<u8>,
    page: usize,
    len: usize,
}

impl FakeRing {
    /// A ring whose consumer and producer both stand at `pos`.
    #[expect(
        clippy::cast_possible_wrap,
        reason = "two pages and the ring's size, far below `i64::MAX`"
    )]
    fn at(pos: usize) -> Self {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        // SAFETY: a valid, NUL-terminated name; the fd returned is ours.
        let raw = unsafe { libc::memfd_create(c"pktrace-fake-ring".as_ptr(), 0) };
        assert!(raw >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: the kernel just returned this fd; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = 2 * page + 2 * SIZE;
        // SAFETY: resizes our own memfd.
        assert_eq!(
            unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) },
            0
        );
        // SAFETY: a new shared mapping of the whole memfd, unmapped in `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let ring = Self {
            fd,
            base: NonNull::new(p.cast()).unwrap(),
            page,
            len,
        };
        ring.pos_at(0).store(pos, Ordering::Release);
        ring.pos_at(page).store(pos, Ordering::Release);
        ring
    }

    fn pos_at(&self, offset: usize) -> &AtomicUsize {
        // SAFETY: offset 0 (consumer) or one page (producer): page-aligned, inside the
        // mapping, which lives as long as `self`.
        unsafe { self.base.add(offset).cast::<AtomicUsize>().as_ref() }
    }

    fn consumer(&self) -> usize {
        self.pos_at(0).load(Ordering::Acquire)
    }

    fn producer(&self) -> usize {
        self.pos_at(self.page).load(Ordering::Acquire)
    }

    /// Writes `bytes` at ring position `pos` into both copies of the data pages.
    fn write(&self, pos: usize, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            let at = (pos + i) & (SIZE - 1);
            for copy in [at, at + SIZE] {
                // SAFETY: `copy` < 2 * SIZE, inside the data pages after the two first pages.
                unsafe { self.base.add(2 * self.page + copy).write(*b) };
            }
        }
    }

    fn header(&self, pos: usize) -> &AtomicU32 {
        let at = pos & (SIZE - 1);
        // SAFETY: 8-byte aligned (records are), inside the first copy of the data pages.
        unsafe {
            self.base
                .add(2 * self.page + at)
                .cast::<AtomicU32>()
                .as_ref()
        }
    }

    /// Sets the header at `pos` (both copies), as the kernel's commit does.
    fn set_header(&self, pos: usize, header: u32) {
        self.header(pos).store(header, Ordering::Release);
        self.write(pos, &header.to_ne_bytes());
    }

    /// Reserves and (unless `flags` has the busy bit) commits a record of `payload` at the
    /// producer position, which moves past it; returns the record's position.
    fn push(&self, payload: &[u8], flags: u32) -> usize {
        let pos = self.producer();
        let len = u32::try_from(payload.len()).unwrap();
        self.write(pos + HDR_SZ, payload);
        self.set_header(pos, len | flags);
        let next = pos + (HDR_SZ + payload.len()).next_multiple_of(8);
        self.pos_at(self.page).store(next, Ordering::Release);
        pos
    }

    fn reader(&self) -> RingReader {
        RingReader::new(self.fd.as_raw_fd(), SIZE).expect("mapping the fake ring")
    }
}

impl Drop for FakeRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `at`, with its length; used by nothing else.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Every record `read` hands over, as owned bytes.
fn read_all(reader: &mut RingReader, max: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    reader.read(max, |r| {
        got.push(r.to_vec());
        1
    });
    got
}

#[test]
fn records_come_in_order_and_the_consumer_position_follows() {
    let ring = FakeRing::at(0);
    let mut reader = ring.reader();
    assert!(read_all(&mut reader, 10).is_empty());
    assert_eq!(ring.consumer(), 0, "nothing read, nothing published");
    ring.push(b"first", 0);
    ring.push(&[7; 16], 0);
    assert_eq!(read_all(&mut reader, 10), [b"first".to_vec(), vec![7; 16]]);
    // 8 + 5 rounded up to 16, then 8 + 16.
    assert_eq!(ring.consumer(), 40);
    assert_eq!(ring.consumer(), ring.producer());
}

#[test]
fn at_most_max_records_are_handed_and_the_rest_wait() {
    let ring = FakeRing::at(0);
    let mut reader = ring.reader();
    for i in 0..5u8 {
        ring.push(&[i; 8], 0);
    }
    assert_eq!(read_all(&mut reader, 2), [vec![0; 8], vec![1; 8]]);
    assert_eq!(ring.consumer(), 32);
    assert_eq!(read_all(&mut reader, 10).len(), 3);
    assert_eq!(ring.consumer(), 80);
}

#[test]
fn a_busy_record_ends_the_batch_until_it_is_committed() {
    let ring = FakeRing::at(0);
    let mut reader = ring.reader();
    ring.push(b"ready", 0);
    let busy = ring.push(b"filling", BUSY_BIT);
    ring.push(b"behind", 0);
    assert_eq!(read_all(&mut reader, 10), [b"ready".to_vec()]);
    assert_eq!(ring.consumer(), busy, "stopped at the busy record");
    ring.set_header(busy, 7);
    assert_eq!(
        read_all(&mut reader, 10),
        [b"filling".to_vec(), b"behind".to_vec()]
    );
    assert_eq!(ring.consumer(), ring.producer());
}

#[test]
fn a_discarded_record_is_passed_over_but_consumed() {
    let ring = FakeRing::at(0);
    let mut reader = ring.reader();
    ring.push(b"kept", 0);
    ring.push(b"thrown away", DISCARD_BIT);
    ring.push(b"kept too", 0);
    assert_eq!(
        read_all(&mut reader, 10),
        [b"kept".to_vec(), b"kept too".to_vec()]
    );
    assert_eq!(ring.consumer(), ring.producer());
}

#[test]
fn a_record_wrapping_around_the_end_reads_whole() {
    // Positions only grow; the data offset is the position modulo the size.
    let start = 3 * SIZE - 16;
    let ring = FakeRing::at(start);
    let mut reader = ring.reader();
    let payload: Vec<u8> = (0..40).collect();
    ring.push(&payload, 0);
    ring.push(b"after the wrap", 0);
    assert_eq!(
        read_all(&mut reader, 10),
        [payload, b"after the wrap".to_vec()]
    );
    assert_eq!(ring.consumer(), start + 48 + 24);
}

#[test]
fn a_header_in_the_last_bytes_of_the_data_area_has_its_record_at_the_start() {
    let start = SIZE - HDR_SZ;
    let ring = FakeRing::at(start);
    let mut reader = ring.reader();
    ring.push(b"payload after the end", 0);
    assert_eq!(
        read_all(&mut reader, 1),
        [b"payload after the end".to_vec()]
    );
    assert_eq!(ring.consumer(), start + 32);
}

#[test]
fn a_length_no_ring_can_hold_stops_the_reader() {
    let ring = FakeRing::at(0);
    let mut reader = ring.reader();
    ring.push(b"good", 0);
    let bad = ring.producer();
    ring.set_header(bad, u32::try_from(SIZE).unwrap());
    ring.pos_at(ring.page).store(bad + 16, Ordering::Release);
    assert_eq!(read_all(&mut reader, 10), [b"good".to_vec()]);
    assert_eq!(ring.consumer(), bad, "never past the bad header");
}

#[test]
fn the_consumer_position_is_published_every_few_records_within_a_batch() {
    let ring = FakeRing::at(0);
    let mut reader = ring.reader();
    let n = PUBLISH_EVERY + 3;
    for i in 0..n {
        ring.push(&u32::try_from(i).unwrap().to_ne_bytes(), 0);
    }
    // Each record takes 16 bytes. While the reader hands record PUBLISH_EVERY (0-based), the
    // kernel already sees the first PUBLISH_EVERY consumed; before that, nothing.
    let mut seen = Vec::new();
    reader.read(n, |_| {
        seen.push(ring.consumer());
        1
    });
    assert_eq!(seen[PUBLISH_EVERY - 1], 0);
    assert_eq!(seen[PUBLISH_EVERY], PUBLISH_EVERY * 16);
    assert_eq!(ring.consumer(), n * 16);
}

#[test]
fn a_ring_size_that_is_not_a_power_of_two_is_refused() {
    let ring = FakeRing::at(0);
    assert!(RingReader::new(ring.fd.as_raw_fd(), SIZE + 8).is_err());
}
