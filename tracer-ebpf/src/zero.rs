//! Zeroing a record in place before it is filled, shared by the ring ([`crate::emit`]) and the
//! per-CPU staging ([`crate::stage`]).

/// Zeroes the `T` at `at` a word at a time and hands it out for filling: zeroing makes it a
/// valid `T` (plain integers) and leaks no stale bytes of the ring or the staging. Word by
/// word because `write_bytes` becomes a call to aya-ebpf's byte-at-a-time `memset` (5
/// instructions per byte, the costliest part of an emitted event).
///
/// # Safety
/// `at` points to `size_of::<T>()` writable bytes, 8-byte aligned, used by nothing else until
/// the program returns; `T` is a record layout (a multiple of 8 bytes).
#[inline(always)]
pub unsafe fn zeroed<T>(at: *mut T) -> &'static mut T {
    let words = at.cast::<u64>();
    let mut i = 0;
    while i < core::mem::size_of::<T>() / 8 {
        // SAFETY: within the `size_of::<T>()` bytes the caller vouches for.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
        i += 1;
    }
    // SAFETY: now all zero, a valid `T`; the caller vouches for the rest.
    unsafe { &mut *at }
}
